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
	p50, p99   time.Duration
	perSecond  float64
	cpuPerCall time.Duration // the target process's CPU per request
	cpuBehind  time.Duration // (scale mode) the CPU per request of the processes behind it
	peakRSS    int64         // the target process's peak RSS in the run, bytes (scale mode)
}

// measure runs conc clients, each with its own session, for d.
func measure(t target, sc scenario, conc int, d time.Duration) (measured, error) {
	sessions, err := openSessions(t.url, conc, sc.modern)
	if err != nil {
		return measured{}, err
	}
	req := sc.build(t)
	if err := call(t.url, sessions[0], req); err != nil { // and warm up
		return measured{}, err
	}
	cpu0, start := cpuTime(t.pid), time.Now()
	all, err := drive(t.url, sessions, req, start.Add(d))
	elapsed, cpu := time.Since(start), cpuTime(t.pid)-cpu0
	if err != nil {
		return measured{}, err
	}
	return summarize(all, elapsed, cpu), nil
}

// openSessions opens one session per client; a 2026-07-28 caller has none
// (an empty id each).
func openSessions(url string, conc int, modern bool) ([]string, error) {
	sessions := make([]string, conc)
	if modern {
		return sessions, nil
	}
	for i := range sessions {
		sid, err := initialize(url)
		if err != nil {
			return nil, err
		}
		sessions[i] = sid
	}
	return sessions, nil
}

// drive sends req from one client per session, back to back, until
// deadline, and returns every request's latency.
func drive(url string, sessions []string, req request, deadline time.Time) ([]time.Duration, error) {
	lat := make([][]time.Duration, len(sessions))
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := call(url, sessions[i], req); err != nil {
					errs[i] = err
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err // the first is enough: the others are alike
		}
	}
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return nil, fmt.Errorf("no request completed")
	}
	return all, nil
}

// summarize turns a run's latencies into its figures; it sorts all.
func summarize(all []time.Duration, elapsed, cpu time.Duration) measured {
	slices.Sort(all)
	return measured{
		p50:        all[len(all)/2],
		p99:        all[len(all)*99/100],
		perSecond:  float64(len(all)) / elapsed.Seconds(),
		cpuPerCall: cpu / time.Duration(len(all)),
	}
}

// initialize opens a 2025-11-25 session and returns its id ("" from a
// stateless server).
func initialize(url string) (string, error) {
	resp, _, err := post(url, "", legacyRequest(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"peers","version":"1"}}}`))
	if err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	if _, _, err := post(url, sid, legacyRequest(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		return "", fmt.Errorf("notifications/initialized: %w", err)
	}
	return sid, nil
}

func call(url, sid string, req request) error {
	_, _, err := post(url, sid, req)
	return err
}

// request is one message with the headers its caller's revision sends.
type request struct {
	body   []byte
	header http.Header
}

func legacyRequest(body string) request {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", "2025-11-25")
	return request{[]byte(body), h}
}

// modernRequest is a 2026-07-28 request of method about name (a tool's name
// or a resource's URI), which its Mcp-Method and Mcp-Name headers repeat.
func modernRequest(method, name, body string) request {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", "2026-07-28")
	h.Set("Mcp-Method", method)
	h.Set("Mcp-Name", name)
	return request{[]byte(body), h}
}

// closeSessions ends the sessions a run opened, so that a long run's
// sessions do not pile up in the target's memory; a target may refuse.
func closeSessions(url string, sessions []string) {
	for _, sid := range sessions {
		if sid == "" {
			continue
		}
		req, _ := http.NewRequest(http.MethodDelete, url, nil)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// post sends one message and reads the whole answer, which must be a
// result (or, for a notification, empty).
func post(url, sid string, r request) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(r.body))
	req.Header = r.header.Clone()
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode >= 300 || (resp.StatusCode == http.StatusOK && !bytes.Contains(out, []byte(`"result"`))) {
		return nil, nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, out)
	}
	return resp, out, nil
}
