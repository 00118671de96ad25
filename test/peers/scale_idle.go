package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// idleTarget starts a fresh process to hold idle streams.
type idleTarget struct {
	name  string
	start func(*processes) (target, error)
	ack   string // what its first event must hold
}

// idleCost is one process's RSS before and after the streams, in bytes.
type idleCost struct{ before, after int64 }

func (c idleCost) perStream() float64 { return float64(c.after-c.before) / idleStreams }

// idle measures the RSS an idle listen stream costs. Each round starts fresh
// processes: a Go process keeps the memory it once used, so a second batch
// of streams in the same one would seem to cost next to nothing.
func (s *scaleRun) idle() error {
	targets := []idleTarget{
		{"Manifold", func(ps *processes) (target, error) {
			return s.manifold(ps, "idle", "cache: {memory: {max_bytes: 0}}\n"+s.upstreamsY)
		}, `"resourceSubscriptions":["bench+test://bench/doc"]`}, // the watch is honoured
		{"bare SSE server", func(ps *processes) (target, error) {
			b, err := ps.startPrinting(s.self, "-serve", "sse")
			return target{url: "http://" + b.addr + "/mcp", pid: b.pid}, err
		}, "{}"},
	}
	res := map[string][]idleCost{}
	for round := range s.c.rounds {
		for _, t := range rotate(targets, round) {
			cost, err := idleCostOf(t)
			if err != nil {
				return fmt.Errorf("idle streams, %s: %w", t.name, err)
			}
			res[t.name] = append(res[t.name], cost)
		}
		progress("idle listen streams", round, s.c.rounds)
	}
	reportIdle(os.Stdout, res, targets)
	return nil
}

// idleCostOf starts a fresh process, opens idleStreams listen streams to it
// and reads its RSS before and after.
func idleCostOf(it idleTarget) (idleCost, error) {
	var procs processes
	defer procs.stopAll()
	t, err := it.start(&procs)
	if err != nil {
		return idleCost{}, err
	}
	// One stream first, opened and closed, so that what a process sets up
	// once (Manifold's watch on its upstream, pools) is not charged to the
	// streams.
	warm, err := openListeners(t.url, 1, it.ack)
	if err != nil {
		return idleCost{}, fmt.Errorf("warm-up: %w", err)
	}
	warm.close()
	time.Sleep(300 * time.Millisecond)
	before := rss(t.pid)
	ls, err := openListeners(t.url, idleStreams, it.ack)
	if err != nil {
		return idleCost{}, err
	}
	defer ls.close()
	time.Sleep(time.Second) // let whatever follows an acknowledgement settle
	return idleCost{before: before, after: rss(t.pid)}, nil
}

// listenClient holds streams open: no timeout, a connection per stream.
var listenClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * idleStreams}}

// listeners are open listen streams, held until close.
type listeners struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// openListeners opens n subscriptions/listen streams and returns once every
// one has had its first event (Manifold's acknowledgement), holding ack.
func openListeners(url string, n int, ack string) (*listeners, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ls := &listeners{cancel: cancel}
	acked := make(chan error, n)
	for i := range n {
		ls.wg.Go(func() { listen(ctx, url, i, ack, acked) })
	}
	var first error
	for range n {
		if err := <-acked; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		ls.close()
		return nil, first
	}
	return ls, nil
}

func (ls *listeners) close() {
	ls.cancel()
	ls.wg.Wait()
}

// listen opens one stream the 2026-07-28 way (no session: the request
// carries its protocol version), reports on acked whether its first event
// holds ack, then reads and drops what follows (keep-alives) until ctx ends.
func listen(ctx context.Context, url string, i int, ack string, acked chan<- error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true,"resourceSubscriptions":["bench+test://bench/doc"]},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"peers","version":"1"}}}}`, i+1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := listenClient.Do(req)
	if err != nil {
		acked <- err
		return
	}
	defer resp.Body.Close()
	if err := firstEvent(resp, ack); err != nil {
		acked <- err
		return
	}
	acked <- nil
	_, _ = io.Copy(io.Discard, resp.Body)
}

// firstEvent reads up to a stream's first data line, which must hold ack.
func firstEvent(resp *http.Response, ack string) error {
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("listen refused, HTTP %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if !bytes.Contains(data, []byte(ack)) {
			return fmt.Errorf("the first event lacks %s: %.300s", ack, data)
		}
		return nil
	}
	return fmt.Errorf("HTTP %d: the stream ended before its first event", resp.StatusCode)
}
