package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

var client = &http.Client{
	Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024},
	Timeout:   30 * time.Second,
}

// measured is one target's figures for one scenario, concurrency and round.
type measured struct {
	p50        time.Duration
	perSecond  float64
	cpuPerCall time.Duration // the target process's CPU per request
}

// measure runs conc clients, each with its own session, for d.
func measure(t target, sc scenario, conc int, d time.Duration) (measured, error) {
	sessions := make([]string, conc)
	for i := range sessions {
		sid, err := initialize(t.url)
		if err != nil {
			return measured{}, err
		}
		sessions[i] = sid
	}
	body := []byte(sc.body(t))
	if err := call(t.url, sessions[0], body); err != nil { // and warm up
		return measured{}, err
	}
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	cpu0, start := cpuTime(t.pid), time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := call(t.url, sessions[i], body); err != nil {
					errs[i] = err
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime(t.pid)-cpu0
	all := slices.Concat(lat...)
	for _, err := range errs {
		if err != nil {
			return measured{}, err
		}
	}
	if len(all) == 0 {
		return measured{}, fmt.Errorf("no request completed")
	}
	slices.Sort(all)
	return measured{p50: all[len(all)/2], perSecond: float64(len(all)) / elapsed.Seconds(), cpuPerCall: cpu / time.Duration(len(all))}, nil
}

// initialize opens a 2025-11-25 session and returns its id ("" from a
// stateless server).
func initialize(url string) (string, error) {
	resp, err := post(url, "", []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"peers","version":"1"}}}`))
	if err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	if _, err := post(url, sid, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		return "", fmt.Errorf("notifications/initialized: %w", err)
	}
	return sid, nil
}

func call(url, sid string, body []byte) error {
	_, err := post(url, sid, body)
	return err
}

// post sends one message and reads the whole answer, which must be a
// result (or, for a notification, empty).
func post(url, sid string, body []byte) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 || (resp.StatusCode == http.StatusOK && !bytes.Contains(out, []byte(`"result"`))) {
		return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, out)
	}
	return resp, nil
}
