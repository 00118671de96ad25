package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawSSE is a 2024-11-05 HTTP+SSE server written by hand, speaking only
// 2024-11-05, whose stream the test shapes: the endpoint event (none, when
// endpoint returns ""), what is written right after it (first, given the
// stream's number), and, with flood, answers to no call between its real
// answers.
type rawSSE struct {
	srv      *httptest.Server
	endpoint func(base string) string
	first    func(stream int) string
	flood    bool
	junk     atomic.Int64 // answers to no call written by the flood
	streams  atomic.Int32
	answers  chan []byte
	// posts records each POST's Authorization and X-Static headers, and
	// pong the id of the last response Manifold posted.
	mu    sync.Mutex
	posts []string
	pong  string
}

func newRawSSE(t *testing.T, endpoint func(string) string) *rawSSE {
	r := &rawSSE{endpoint: endpoint, answers: make(chan []byte, 64)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", r.stream)
	mux.HandleFunc("POST /messages", r.message)
	r.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		r.srv.CloseClientConnections()
		r.srv.Close()
	})
	return r
}

func (r *rawSSE) url() string { return r.srv.URL + "/sse" }

func (r *rawSSE) stream(w http.ResponseWriter, req *http.Request) {
	n := int(r.streams.Add(1))
	f := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if ep := r.endpoint(r.srv.URL); ep != "" {
		fmt.Fprintf(w, "event: endpoint\ndata: %s\n\n", ep)
	}
	if r.first != nil {
		fmt.Fprint(w, r.first(n))
	}
	f.Flush()
	stop := req.Context().Done()
	for i := 0; ; i++ {
		var junk <-chan time.Time // nil: wait for an answer
		if r.flood {
			junk = closedTimer
		}
		select {
		case a := <-r.answers:
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", a)
			f.Flush()
		case <-stop:
			return
		case <-junk:
			if _, err := fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"junk-%d\",\"result\":{\"pad\":%q}}\n\n", i, strings.Repeat("y", 512)); err != nil {
				return
			}
			r.junk.Add(1)
			if i%100 == 0 {
				f.Flush()
			}
		}
	}
}

// closedTimer is always ready: the flood's turn when no answer is.
var closedTimer = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// message answers initialize (with 2024-11-05), resources/list and
// resources/read on the stream.
func (r *rawSSE) message(w http.ResponseWriter, req *http.Request) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			URI string `json:"uri"`
		} `json:"params"`
	}
	if json.NewDecoder(req.Body).Decode(&m) != nil {
		http.Error(w, "bad message", http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	r.mu.Lock()
	r.posts = append(r.posts, req.Header.Get("Authorization")+"|"+req.Header.Get("X-Static"))
	if m.Method == "" && m.ID != nil {
		r.pong = string(m.ID)
	}
	r.mu.Unlock()
	if m.ID == nil || m.Method == "" {
		return
	}
	result := `{}`
	switch m.Method {
	case "initialize":
		result = `{"protocolVersion":"2024-11-05","capabilities":{"resources":{}},"serverInfo":{"name":"raw","version":"1"}}`
	case "resources/list":
		result = `{"resources":[{"uri":"test://raw/0","name":"zero"}]}`
	case "resources/read":
		result = fmt.Sprintf(`{"contents":[{"uri":%q,"text":"raw resource"}]}`, m.Params.URI)
	}
	r.answers <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result))
}

func sameOrigin(base string) string { return "/messages?session=1" }

// The hostile servers: each is bounded in time and memory, logged with the
// upstream's name, and leaves the other upstreams untouched.
func TestSSEHostileServers(t *testing.T) {
	good := modernSDK(t, newHintedServer().Server)
	behind := func(t *testing.T, raw *rawSSE, extra ...string) *proxy {
		return startProxy(t, "upstreams:"+httpUpstreamYAML("bad", raw.url(), append([]string{"transport: sse", "timeout: 1s"}, extra...)...)+httpUpstreamYAML("good", good.URL))
	}
	failsFast := func(t *testing.T, p *proxy, logged string) {
		t.Helper()
		// The line is the failing episode's first, from the channel's
		// opening that the watch starts: looked for before a read, whose
		// own failure (its 1 s timeout, the closed channel), at the same
		// moment on a loaded machine, would otherwise be the one logged.
		// The whole suite under -race can delay it past 5 s.
		eventually(t, 15*time.Second, func() error {
			for _, line := range strings.Split(p.Logs.String(), "\n") {
				if strings.Contains(line, logged) && strings.Contains(line, "upstream=bad") {
					return nil
				}
			}
			var bad []string
			for _, line := range strings.Split(p.Logs.String(), "\n") {
				if strings.Contains(line, "upstream=bad") {
					bad = append(bad, line)
				}
			}
			return fmt.Errorf("no log line with %q and upstream=bad; its lines:\n%s", logged, strings.Join(bad, "\n"))
		})
		start := time.Now()
		if r := post(t, p.URL, headers("resources/read", "bad+test://raw/0"), rpcBody(1, "resources/read", `"uri":"bad+test://raw/0"`)); r.Error == nil {
			t.Errorf("read through the hostile server: %s", r.Body)
		}
		// A bounded wait: the hostile server costs the read its 1 s
		// timeout at most, not a hang.
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the failing read took %v", d)
		}
		if text, _, _ := readAs(t, p.URL, "good+test://pub/1", ""); !strings.HasPrefix(text, "for=") {
			t.Errorf("the good upstream: %q", text)
		}
	}
	t.Run("never sends the endpoint event", func(t *testing.T) {
		failsFast(t, behind(t, newRawSSE(t, func(string) string { return "" })), "no endpoint event")
	})
	t.Run("malformed endpoint event", func(t *testing.T) {
		failsFast(t, behind(t, newRawSSE(t, func(string) string { return "http://[::1" })), "malformed endpoint event")
	})
	t.Run("endpoint on another origin", func(t *testing.T) {
		var stolen atomic.Int32
		evil := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { stolen.Add(1) }))
		t.Cleanup(evil.Close)
		failsFast(t, behind(t, newRawSSE(t, func(string) string { return evil.URL + "/messages" })), "is not on the stream's origin")
		if stolen.Load() != 0 {
			t.Errorf("%d requests went to the other origin", stolen.Load())
		}
	})
	t.Run("an event over max_response_bytes", func(t *testing.T) {
		raw := newRawSSE(t, sameOrigin)
		raw.first = func(stream int) string {
			if stream > 1 {
				return ""
			}
			return "event: message\ndata: " + strings.Repeat("x", 4<<20) + "\n\n"
		}
		p := behind(t, raw, "max_response_bytes: 64KiB")
		eventually(t, 10*time.Second, func() error {
			if !strings.Contains(p.Logs.String(), "larger than max_response_bytes") {
				return fmt.Errorf("the oversized event was not logged")
			}
			return nil
		})
		eventually(t, 10*time.Second, func() error {
			r := post(t, p.URL, headers("resources/read", "bad+test://raw/0"), rpcBody(1, "resources/read", `"uri":"bad+test://raw/0"`))
			if r.Error != nil {
				return fmt.Errorf("after reconnecting: %s", r.Body)
			}
			return nil
		})
	})
	t.Run("a flood of answers to no call", func(t *testing.T) {
		began := time.Now()
		raw := newRawSSE(t, sameOrigin)
		raw.flood = true
		// A flood under -race on two shared cores makes a read slow: what
		// this measures is memory and the log, not latency.
		p := startProxy(t, "upstreams:"+httpUpstreamYAML("bad", raw.url(), "transport: sse", "timeout: 30s")+httpUpstreamYAML("good", good.URL))
		heap := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapInuse
		}
		before := heap()
		for i := range 20 {
			if text := readText(t, p.URL, "bad+test://raw/0"); text != "raw resource" {
				t.Fatalf("read %d during the flood: %q", i, text)
			}
		}
		// The heap is measured once Manifold has taken in 60,000 answers of
		// some 560 bytes, more than the heap may grow by (the stream is
		// written only as fast as it is read; the reads usually take in
		// more than that).
		eventually(t, 60*time.Second, func() error {
			if n := raw.junk.Load(); n < 60_000 {
				return fmt.Errorf("%d answers to no call taken in, want 60,000", n)
			}
			return nil
		})
		if grew := int64(heap()) - int64(before); grew > 32<<20 {
			t.Errorf("the heap grew %d MiB during the flood", grew>>20)
		}
		// The flood is logged, with its count, at most once every 10 s
		// however long it lasts.
		lines := strings.Count(p.Logs.String(), "answered a call not in flight")
		if lasted := time.Since(began); lines == 0 || lines > 1+int(lasted/(10*time.Second)) {
			t.Errorf("%d log lines for a flood of %v, want one per 10 s", lines, lasted.Round(time.Second))
		}
	})
}

// Each POST carries the upstream's own headers and the caller's forwarded
// ones; a ping the server sends on the stream is answered (by POST).
func TestSSEHeadersAndPing(t *testing.T) {
	raw := newRawSSE(t, sameOrigin)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("raw", raw.url(), "transport: sse", "headers: {X-Static: s1}", "forward_headers: [Authorization]"))
	h := headers("resources/read", "raw+test://raw/0")
	h.Set("Authorization", "Bearer caller-token")
	if r := post(t, p.URL, h, rpcBody(1, "resources/read", `"uri":"raw+test://raw/0"`)); r.Error != nil {
		t.Fatalf("read: %s", r.Body)
	}
	raw.mu.Lock()
	posts := fmt.Sprint(raw.posts)
	raw.mu.Unlock()
	if !strings.Contains(posts, "Bearer caller-token|s1") || !strings.Contains(posts, "|s1") {
		t.Errorf("headers on the POSTs: %s", posts)
	}
	raw.answers <- []byte(`{"jsonrpc":"2.0","id":"srv-ping-1","method":"ping"}`)
	eventually(t, 5*time.Second, func() error {
		raw.mu.Lock()
		defer raw.mu.Unlock()
		if raw.pong != `"srv-ping-1"` {
			return fmt.Errorf("the server's ping was not answered (last response id %q)", raw.pong)
		}
		return nil
	})
}
