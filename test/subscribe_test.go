package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// listenTracker records the subscriptions/listen streams an HTTP upstream
// holds open, and what each one asks for.
type listenTracker struct {
	mu     sync.Mutex
	open   map[int][]string // stream number → its resourceSubscriptions
	asked  [][]string       // every stream's resourceSubscriptions, open or not
	next   int
	opened atomic.Int32
}

func (lt *listenTracker) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") != "subscriptions/listen" {
			next.ServeHTTP(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var m struct {
			Params struct {
				Notifications struct {
					URIs []string `json:"resourceSubscriptions"`
				} `json:"notifications"`
			} `json:"params"`
		}
		_ = json.Unmarshal(b, &m)
		lt.mu.Lock()
		n := lt.next
		lt.next++
		lt.asked = append(lt.asked, m.Params.Notifications.URIs)
		lt.mu.Unlock()
		lt.opened.Add(1)
		defer func() {
			lt.mu.Lock()
			delete(lt.open, n)
			lt.mu.Unlock()
		}()
		// The stream counts once the server has written to it: its
		// acknowledgment, sent after the subscription is registered.
		next.ServeHTTP(&ackWriter{ResponseWriter: w, onFirst: func() {
			lt.mu.Lock()
			lt.open[n] = m.Params.Notifications.URIs
			lt.mu.Unlock()
		}}, r)
	})
}

type ackWriter struct {
	http.ResponseWriter
	onFirst func()
	once    sync.Once
}

func (a *ackWriter) Write(b []byte) (int, error) {
	n, err := a.ResponseWriter.Write(b)
	a.once.Do(a.onFirst)
	return n, err
}

func (a *ackWriter) Flush() {
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// watching counts the open upstream streams that subscribe to uri.
func (lt *listenTracker) watching(uri string) int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	n := 0
	for _, uris := range lt.open {
		if slices.Contains(uris, uri) {
			n++
		}
	}
	return n
}

// askedFor counts the streams, open or closed, that asked for uri.
func (lt *listenTracker) askedFor(uri string) int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	n := 0
	for _, uris := range lt.asked {
		if slices.Contains(uris, uri) {
			n++
		}
	}
	return n
}

func (lt *listenTracker) streams() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.open)
}

// trackedModern serves s statelessly behind a listenTracker.
func trackedModern(t testing.TB, s *mcp.Server) (*httpUpstream, *listenTracker) {
	lt := &listenTracker{open: map[int][]string{}}
	return serveHTTP(t, lt.wrap(modernHandler(s))), lt
}

// sseStream is a raw downstream subscriptions/listen stream.
type sseStream struct {
	Header   http.Header
	Status   int
	events   chan map[string]any
	comments atomic.Int32
	cancel   context.CancelFunc
	done     chan struct{}
}

func listen(t testing.TB, url string, id int, filter string, extra ...string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":%s,%s}}`, id, filter, metaOK)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header = headers("subscriptions/listen", "")
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("listen: %v", err)
	}
	s := &sseStream{Header: resp.Header, Status: resp.StatusCode, events: make(chan map[string]any, 1024), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				s.comments.Add(1)
			case strings.HasPrefix(line, "data: "):
				var m map[string]any
				if json.Unmarshal([]byte(line[6:]), &m) == nil {
					s.events <- m
				}
			case resp.StatusCode != http.StatusOK && strings.HasPrefix(line, "{"):
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil {
					s.events <- m
				}
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() {
	s.cancel()
	<-s.done
}

// next returns the next message, failing after d.
func (s *sseStream) next(t testing.TB, d time.Duration) map[string]any {
	t.Helper()
	select {
	case m, ok := <-s.events:
		if !ok {
			t.Fatal("stream ended")
		}
		return m
	case <-time.After(d):
		t.Fatalf("no message within %v", d)
		return nil
	}
}

// expect reads messages until one with method (and, if uri is given, that
// params.uri) arrives; every message read must carry subscriptionId id.
func (s *sseStream) expect(t testing.TB, id int, method, uri string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := s.next(t, time.Until(deadline))
		checkTag(t, m, id)
		params, _ := m["params"].(map[string]any)
		if m["method"] == method && (uri == "" || params["uri"] == uri) {
			return m
		}
	}
	t.Fatalf("no %s %s", method, uri)
	return nil
}

// quiet asserts that nothing but keep-alives arrives for d.
func (s *sseStream) quiet(t testing.TB, d time.Duration, what string) {
	t.Helper()
	select {
	case m := <-s.events:
		t.Errorf("%s: got %v", what, m)
	case <-time.After(d):
	}
}

func checkTag(t testing.TB, m map[string]any, id int) {
	t.Helper()
	params, _ := m["params"].(map[string]any)
	meta, _ := params["_meta"].(map[string]any)
	if m["method"] != nil && meta["io.modelcontextprotocol/subscriptionId"] != float64(id) {
		t.Errorf("message without its subscription id %d: %v", id, m)
	}
}

func updateUpstream(t testing.TB, s *mcp.Server, uri string) {
	t.Helper()
	if err := s.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
}

// The acknowledgment comes first, carries the subscription id and exactly
// the subset Manifold honours; every later notification carries the id;
// nothing the filter did not ask for arrives; URIs are namespaced both ways;
// quiet streams get keep-alives.
func TestSubscribeAckFilterTags(t *testing.T) {
	s := newSDKServer("alpha", sdkOptions{resources: 3})
	up, lt := trackedModern(t, s)
	p := startProxy(t, "subscriptions: {keepalive: 200ms}\nupstreams:"+httpUpstreamYAML("alpha", up.URL))
	readText(t, p.URL, "alpha+test://alpha/0") // the upstream is negotiated
	st := listen(t, p.URL, 77, `{"resourcesListChanged":true,"toolsListChanged":true,"promptsListChanged":true,"resourceSubscriptions":["alpha+test://alpha/0","nosuch+test://x","alpha+test://alpha/1"]}`)
	if st.Status != 200 || st.Header.Get("Content-Type") != "text/event-stream" || st.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("listen answered HTTP %d %v", st.Status, st.Header)
	}
	ack := st.next(t, 5*time.Second)
	if ack["method"] != "notifications/subscriptions/acknowledged" {
		t.Fatalf("first message %v", ack)
	}
	checkTag(t, ack, 77)
	got, _ := json.Marshal(ack["params"].(map[string]any)["notifications"])
	if string(got) != `{"resourceSubscriptions":["alpha+test://alpha/0","alpha+test://alpha/1"],"resourcesListChanged":true}` {
		t.Errorf("honoured subset %s", got)
	}
	eventually(t, 5*time.Second, func() error {
		if lt.watching("test://alpha/0") != 1 || lt.watching("test://alpha/1") != 1 {
			return fmt.Errorf("upstream streams watching: %d, %d", lt.watching("test://alpha/0"), lt.watching("test://alpha/1"))
		}
		return nil
	})

	updateUpstream(t, s, "test://alpha/2") // not watched
	updateUpstream(t, s, "test://alpha/1")
	m := st.expect(t, 77, "notifications/resources/updated", "")
	if uri := m["params"].(map[string]any)["uri"]; uri != "alpha+test://alpha/1" {
		t.Errorf("first update delivered is for %v, want only the watched alpha+test://alpha/1", uri)
	}
	// A tool appears upstream: tools/list_changed was asked for but not
	// honoured, so it must not arrive. A resource appears: list_changed does.
	s.AddTool(&mcp.Tool{Name: "t", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	st.quiet(t, 400*time.Millisecond, "after a tool change")
	s.AddResource(&mcp.Resource{URI: "test://alpha/new", Name: "new"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	st.expect(t, 77, "notifications/resources/list_changed", "")
	if st.comments.Load() == 0 {
		t.Error("no keep-alive comment on a quiet stream")
	}
	// Nothing the client did not ask for: a stream for one URI gets no
	// list changes.
	only := listen(t, p.URL, 78, `{"resourceSubscriptions":["alpha+test://alpha/0"]}`)
	only.next(t, 5*time.Second)
	s.AddResource(&mcp.Resource{URI: "test://alpha/newer", Name: "newer"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	only.quiet(t, 400*time.Millisecond, "a stream without resourcesListChanged")
}

// A go-sdk client, subscribing the 2026-07-28 way (subscriptions/listen),
// gets updates for namespaced URIs.
func TestSubscribeGoSDKClient(t *testing.T) {
	s := newSDKServer("alpha", sdkOptions{resources: 2})
	up, lt := trackedModern(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", up.URL))
	readText(t, p.URL, "alpha+test://alpha/0")
	updates := make(chan string, 10)
	acked := make(chan struct{}, 10)
	c := mcp.NewClient(&mcp.Implementation{Name: "subscriber", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updates <- r.Params.URI },
	})
	c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "notifications/subscriptions/acknowledged" {
				acked <- struct{}{}
			}
			return next(ctx, method, req)
		}
	})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "alpha+test://alpha/1"}); err != nil {
		t.Fatal(err)
	}
	<-acked
	eventually(t, 5*time.Second, func() error {
		if lt.watching("test://alpha/1") != 1 {
			return fmt.Errorf("not watched upstream yet")
		}
		return nil
	})
	updateUpstream(t, s, "test://alpha/1")
	select {
	case uri := <-updates:
		if uri != "alpha+test://alpha/1" {
			t.Errorf("update for %q", uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the go-sdk client got no update")
	}
}

// 100 downstream subscribers to one URI cost the upstream one subscription,
// and none once they have all left.
func TestSubscribeRefcount(t *testing.T) {
	s := newSDKServer("alpha", sdkOptions{resources: 1})
	up, lt := trackedModern(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", up.URL))
	readText(t, p.URL, "alpha+test://alpha/0")
	var streams []*sseStream
	for i := 0; i < 100; i++ {
		st := listen(t, p.URL, 1000+i, `{"resourceSubscriptions":["alpha+test://alpha/0"]}`)
		st.next(t, 5*time.Second)
		streams = append(streams, st)
	}
	eventually(t, 5*time.Second, func() error {
		if n := lt.watching("test://alpha/0"); n != 1 {
			return fmt.Errorf("%d upstream subscriptions", n)
		}
		return nil
	})
	// Not one open at a time either: each subscriber was acknowledged
	// once the upstream stream carried its URI, and few streams ever asked.
	if n := lt.askedFor("test://alpha/0"); n > 2 {
		t.Errorf("the upstream was asked %d times for a subscription to test://alpha/0 by 100 subscribers", n)
	}
	updateUpstream(t, s, "test://alpha/0")
	for i, st := range streams {
		st.expect(t, 1000+i, "notifications/resources/updated", "alpha+test://alpha/0")
	}
	for _, st := range streams {
		st.close()
	}
	eventually(t, 5*time.Second, func() error {
		if n := lt.watching("test://alpha/0"); n != 0 {
			return fmt.Errorf("%d upstream subscriptions after everyone left", n)
		}
		return nil
	})
	// The list-changed watch stays: the cache depends on it.
	if lt.streams() != 1 {
		t.Errorf("%d upstream streams after everyone left, want the 1 for list changes", lt.streams())
	}
}

// A legacy upstream is watched with resources/subscribe on its session and
// its GET stream; the last subscriber leaving unsubscribes.
func TestSubscribeLegacyUpstream(t *testing.T) {
	s := newSDKServer("old", sdkOptions{resources: 2})
	up := legacySDK(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("old", up.URL))
	readText(t, p.URL, "old+test://old/0")
	st := listen(t, p.URL, 5, `{"resourcesListChanged":true,"resourceSubscriptions":["old+test://old/1"]}`)
	st.next(t, 5*time.Second)
	eventually(t, 5*time.Second, func() error {
		if up.Calls.get("resources/subscribe test://old/1") != 1 || up.Calls.get("GET") == 0 {
			return fmt.Errorf("subscribe calls %d, GET streams %d", up.Calls.get("resources/subscribe test://old/1"), up.Calls.get("GET"))
		}
		return nil
	})
	updateUpstream(t, s, "test://old/1")
	st.expect(t, 5, "notifications/resources/updated", "old+test://old/1")
	s.AddResource(&mcp.Resource{URI: "test://old/new", Name: "new"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	st.expect(t, 5, "notifications/resources/list_changed", "")
	st.close()
	eventually(t, 5*time.Second, func() error {
		if up.Calls.get("resources/unsubscribe test://old/1") != 1 {
			return fmt.Errorf("unsubscribe not sent")
		}
		return nil
	})
}

// A stdio upstream (the go-sdk server as a child process) delivers updates
// over the shared channel; when the process is killed and restarted, the
// subscribers are told that anything may have changed, and updates resume.
func TestSubscribeStdioUpstream(t *testing.T) {
	p := startProxy(t, "upstreams:"+childUpstream("kid", "sdk:kid"))
	readText(t, p.URL, "kid+test://kid/0")
	st := listen(t, p.URL, 9, `{"resourcesListChanged":true,"resourceSubscriptions":["kid+test://kid/tick","kid+test://kid/1"]}`)
	st.next(t, 5*time.Second)
	st.expect(t, 9, "notifications/resources/updated", "kid+test://kid/tick")

	pid := 0
	fmt.Sscan(readText(t, p.URL, "kid+test://kid/pid"), &pid)
	killProcess(t, pid)
	// After the restart: list_changed and an update for each watched URI,
	// even the one that did not change, then the ticks again.
	st.expect(t, 9, "notifications/resources/list_changed", "")
	st.expect(t, 9, "notifications/resources/updated", "kid+test://kid/1")
	st.expect(t, 9, "notifications/resources/updated", "kid+test://kid/tick")
}

// An upstream stream that drops (the upstream restarts its connections) is
// re-opened; subscribers are told what may have changed.
func TestSubscribeUpstreamDropRestored(t *testing.T) {
	s := newSDKServer("alpha", sdkOptions{resources: 2})
	up, lt := trackedModern(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", up.URL))
	readText(t, p.URL, "alpha+test://alpha/0")
	st := listen(t, p.URL, 3, `{"resourcesListChanged":true,"resourceSubscriptions":["alpha+test://alpha/0"]}`)
	st.next(t, 5*time.Second)
	eventually(t, 5*time.Second, func() error {
		if lt.watching("test://alpha/0") != 1 {
			return fmt.Errorf("not watched yet")
		}
		return nil
	})
	before := lt.opened.Load()
	up.srv.CloseClientConnections()
	st.expect(t, 3, "notifications/resources/list_changed", "")
	st.expect(t, 3, "notifications/resources/updated", "alpha+test://alpha/0")
	if lt.opened.Load() <= before {
		t.Error("the upstream stream was not re-opened")
	}
	// And it works again.
	eventually(t, 5*time.Second, func() error {
		if lt.watching("test://alpha/0") != 1 {
			return fmt.Errorf("not watched again")
		}
		return nil
	})
	updateUpstream(t, s, "test://alpha/0")
	st.expect(t, 3, "notifications/resources/updated", "alpha+test://alpha/0")
}

// Once resources/updated has arrived, no replica sharing Redis serves the
// old answer, from memory or from Redis.
func TestNoStaleReadAfterUpdate(t *testing.T) {
	rs := redistest.Start(t)
	var version atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "doc", Version: "1"}, &mcp.ServerOptions{
		SetCacheable:       func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 600_000, "public" },
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	s.AddResource(&mcp.Resource{URI: "test://doc", Name: "doc"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://doc", Text: fmt.Sprintf("version %d", version.Load())}}}, nil
	})
	up, lt := trackedModern(t, s)
	shared := fmt.Sprintf("cache: {secret: stale-secret-0123456789, redis: {url: %q}}\n", rs.URL())
	a := startProxy(t, shared+"upstreams:"+httpUpstreamYAML("d", up.URL))
	b := startProxy(t, shared+"upstreams:"+httpUpstreamYAML("d", up.URL))
	for round := 1; round <= 5; round++ {
		for _, p := range []*proxy{a, b, a, b} {
			if got := readText(t, p.URL, "d+test://doc"); got != fmt.Sprintf("version %d", round-1) {
				t.Fatalf("round %d: read %q", round, got)
			}
		}
		st := listen(t, a.URL, round, `{"resourceSubscriptions":["d+test://doc"]}`)
		st.next(t, 5*time.Second)
		eventually(t, 5*time.Second, func() error {
			if lt.watching("test://doc") == 0 {
				return fmt.Errorf("not watched")
			}
			return nil
		})
		version.Add(1)
		updateUpstream(t, s, "test://doc")
		st.expect(t, round, "notifications/resources/updated", "d+test://doc")
		for _, p := range []*proxy{a, b} {
			if got := readText(t, p.URL, "d+test://doc"); got != fmt.Sprintf("version %d", round) {
				t.Errorf("round %d: after the update a replica served %q", round, got)
			}
		}
		st.close()
	}
}

// On shutdown each open stream gets the graceful-closure result, then ends.
func TestSubscribeGracefulClosure(t *testing.T) {
	up, _ := trackedModern(t, newSDKServer("alpha", sdkOptions{resources: 1}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", up.URL))
	readText(t, p.URL, "alpha+test://alpha/0")
	st := listen(t, p.URL, 41, `{"resourcesListChanged":true}`)
	st.next(t, 5*time.Second)
	go p.stop()
	m := st.next(t, 10*time.Second)
	res, _ := m["result"].(map[string]any)
	meta, _ := res["_meta"].(map[string]any)
	if m["id"] != float64(41) || res["resultType"] != "complete" || meta["io.modelcontextprotocol/subscriptionId"] != float64(41) {
		t.Errorf("closing message %v", m)
	}
	select {
	case <-st.done:
	case <-time.After(10 * time.Second):
		t.Error("stream still open after the closure")
	}
}

// A malformed listen gets a JSON-RPC error, not a stream.
func TestSubscribeBadFilter(t *testing.T) {
	up, _ := trackedModern(t, newSDKServer("alpha", sdkOptions{}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", up.URL))
	post(t, p.URL, headers("subscriptions/listen", ""), rpcBody(1, "subscriptions/listen", `"notifications":7`)).wantError(t, http.StatusBadRequest, -32602)
	post(t, p.URL, headers("subscriptions/listen", ""), rpcBody(1, "subscriptions/listen", "")).wantError(t, http.StatusBadRequest, -32602)
}

// A subscription that arrives before Manifold has finished negotiating with
// the upstream (just after startup) is honoured all the same.
func TestSubscribeRightAfterStartup(t *testing.T) {
	s := newSDKServer("alpha", sdkOptions{resources: 1})
	slowStart := make(chan struct{})
	h := modernHandler(s)
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-slowStart // the upstream answers nothing until the subscriber is waiting
		h.ServeHTTP(w, r)
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", up.URL))
	// The listen reaches Manifold through a door that lets the upstream
	// answer once Manifold has read the whole request: it is about to
	// subscribe then, with nothing negotiated yet.
	door := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &onEOF{ReadCloser: r.Body, f: func() { close(slowStart) }}
		p.handler.ServeHTTP(w, r)
	}))
	t.Cleanup(door.Close)
	st := listen(t, door.URL+"/mcp", 8, `{"resourceSubscriptions":["alpha+test://alpha/0"]}`)
	ack := st.next(t, 10*time.Second)
	if got, _ := json.Marshal(ack["params"].(map[string]any)["notifications"]); string(got) != `{"resourceSubscriptions":["alpha+test://alpha/0"]}` {
		t.Fatalf("honoured %s", got)
	}
	updateUpstream(t, s, "test://alpha/0")
	st.expect(t, 8, "notifications/resources/updated", "alpha+test://alpha/0")
}

// onEOF calls f once, when its reader is read to the end.
type onEOF struct {
	io.ReadCloser
	f    func()
	once sync.Once
}

func (r *onEOF) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err == io.EOF {
		r.once.Do(r.f)
	}
	return n, err
}

// An upstream whose watch takes longer than the acknowledgment waits: an
// update published before its watch was up reached no one, so once the
// watch is up the subscriber is told its resource may have changed.
func TestSubscribeAckedBeforeUpstreamWatchCatchesUp(t *testing.T) {
	s := newSDKServer("alpha", sdkOptions{resources: 1})
	slowStart := make(chan struct{})
	h := modernHandler(s)
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"subscriptions/listen"`)) {
			<-slowStart // discovery answers; the watch does not, yet
		}
		h.ServeHTTP(w, r)
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", up.URL))
	st := listen(t, p.URL, 8, `{"resourceSubscriptions":["alpha+test://alpha/0"]}`)
	ack := st.next(t, 10*time.Second) // after the hub's 3 s wait
	if got, _ := json.Marshal(ack["params"].(map[string]any)["notifications"]); string(got) != `{"resourceSubscriptions":["alpha+test://alpha/0"]}` {
		t.Fatalf("honoured %s", got)
	}
	updateUpstream(t, s, "test://alpha/0") // nobody upstream listens yet
	close(slowStart)
	st.expect(t, 8, "notifications/resources/updated", "alpha+test://alpha/0")
}

// A list Manifold caches while its first watch of the upstream is still
// being opened is not believed past that watch: the upstream may have
// changed it in between and told no one. Once the watch is up, the next
// listing asks the upstream and shows the change, long before the list's
// 60 s TTL.
func TestListCachedBeforeTheFirstWatchIsRevalidated(t *testing.T) {
	h := newHintedServer()
	release := make(chan struct{})
	var held atomic.Int32
	lt := &listenTracker{open: map[int][]string{}}
	tracked := lt.wrap(modernHandler(h.Server))
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "subscriptions/listen" {
			held.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		tracked.ServeHTTP(w, r)
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("h", up.URL))
	eventually(t, 10*time.Second, func() error {
		if held.Load() == 0 {
			return errors.New("Manifold has not asked the upstream for subscriptions/listen")
		}
		return nil
	})
	before := uris(listAll(t, p.URL, "resources/list"))
	if slices.Contains(before, "h+test://added") {
		t.Fatalf("listed before it was added: %v", before)
	}
	// The change, while no stream is open: the server tells no one.
	h.Server.AddResource(&mcp.Resource{URI: "test://added", Name: "added"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://added", Text: "added"}}}, nil
	})
	if again := uris(listAll(t, p.URL, "resources/list")); !slices.Equal(again, before) {
		t.Fatalf("the list was not cached: %v, then %v", before, again)
	}
	close(release)
	eventually(t, 10*time.Second, func() error {
		if lt.streams() == 0 {
			return errors.New("no subscriptions/listen stream open at the upstream")
		}
		return nil
	})
	eventually(t, 5*time.Second, func() error {
		if got := uris(listAll(t, p.URL, "resources/list")); !slices.Contains(got, "h+test://added") {
			return fmt.Errorf("after the watch came up the list is still %v", got)
		}
		return nil
	})
}
