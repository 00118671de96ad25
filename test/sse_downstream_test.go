package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// The 2024-11-05 HTTP+SSE transport served downstream: GET /sse opens a
// session and its stream, whose first event names where the session's
// POSTs go; answers come on the stream. Driven on raw HTTP (the stream on
// one replica, the POSTs on another) and by the SSE client transports of
// the go-sdk, mcp-go and the TypeScript SDK v1, behind a round-robin load
// balancer in front of two replicas sharing Redis.

// sseReplicas are two Manifolds in front of the go-sdk tool server "web",
// sharing sessions through one Redis.
func sseReplicas(t *testing.T, extra string) (a, b *proxy, s *mcp.Server) {
	rs := redistest.Start(t)
	s = sdkToolServer("web", sdkOptions{resources: 2})
	up := serveHTTP(t, streamingSDK(s))
	shared := extra + fmt.Sprintf("cache: {secret: session-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL()) + httpUpstreamYAML("web", up.URL)
	return startProxy(t, shared), startProxy(t, shared), s
}

// origin is a proxy's scheme and host.
func origin(p *proxy) string { return strings.TrimSuffix(p.URL, "/mcp") }

// sseEvent is one event of a stream, as any SSE reader sees it.
type sseEvent struct {
	Name string // "" is "message"
	Data string
}

// sseClient is a raw HTTP+SSE session: its stream's events, and where its
// POSTs go (the endpoint event's URL, resolved against the stream's).
type sseClient struct {
	events   chan sseEvent
	endpoint *url.URL
	close    func()
}

// openSSE opens GET /sse at base with headers h; the first event must be
// the endpoint.
func openSSE(t *testing.T, base string, h http.Header) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse", nil)
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /sse: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET /sse: HTTP %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	c := &sseClient{events: make(chan sseEvent, 256), close: cancel}
	go readEvents(resp.Body, c.events)
	first := c.next(t, 5*time.Second)
	if first.Name != "endpoint" {
		t.Fatalf("first event %+v, want endpoint", first)
	}
	rel, err := url.Parse(first.Data)
	if err != nil {
		t.Fatal(err)
	}
	c.endpoint = req.URL.ResolveReference(rel)
	return c
}

// readEvents parses a stream by the SSE rules: fields up to a blank line,
// data lines joined, comments skipped.
func readEvents(body io.ReadCloser, out chan<- sseEvent) {
	defer body.Close()
	defer close(out)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var ev sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != nil {
				ev.Data = strings.Join(data, "\n")
				out <- ev
			}
			ev, data = sseEvent{}, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			ev.Name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

func (c *sseClient) next(t *testing.T, d time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no event within %v", d)
		return sseEvent{}
	}
}

// message is the next message event, decoded.
func (c *sseClient) message(t *testing.T) map[string]any {
	t.Helper()
	ev := c.next(t, 10*time.Second)
	var m map[string]any
	if ev.Name != "message" && ev.Name != "" || json.Unmarshal([]byte(ev.Data), &m) != nil {
		t.Fatalf("event %+v, want a JSON-RPC message", ev)
	}
	return m
}

// postTo sends body to the session's endpoint, on the origin of base
// (another replica than the stream's, when the test says so).
func (c *sseClient) postTo(t *testing.T, base string, h http.Header, body string) *rawResponse {
	t.Helper()
	u := *c.endpoint
	b, _ := url.Parse(base)
	u.Host = b.Host
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	return post(t, u.String(), h, body)
}

// The wire, on raw HTTP, with the stream on replica a and every POST on
// replica b: the endpoint event names a same-origin path; each POST is 202
// with no body and its answer, the progress ahead of it and the session's
// resource updates come on a's stream; 2024-11-05 is negotiated; a request
// before initialize is refused there; the session's bounds and errors are
// answered on the POST; closing the stream ends the session.
func TestSSEDownstreamWire(t *testing.T) {
	a, b, s := sseReplicas(t, "")
	c := openSSE(t, origin(a), nil)
	if c.endpoint.Host != strings.TrimPrefix(origin(a), "http://") || c.endpoint.Path != "/messages" || len(c.endpoint.Query().Get("sessionId")) < 32 {
		t.Fatalf("endpoint %s: want same-origin /messages?sessionId=ID", c.endpoint)
	}
	accepted := func(r *rawResponse, what string) {
		t.Helper()
		if r.Status != http.StatusAccepted || len(r.Body) != 0 {
			t.Fatalf("%s: HTTP %d %s, want 202 and no body", what, r.Status, r.Body)
		}
	}
	accepted(c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":0,"method":"tools/list"}`), "tools/list before initialize")
	if m := c.message(t); m["id"] != 0.0 || m["error"] == nil || m["error"].(map[string]any)["code"] != -32600.0 {
		t.Errorf("a request before initialize: %v, want -32600", m)
	}
	accepted(c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw-sse","version":"1"}}}`), "initialize")
	init := c.message(t)
	if res, _ := init["result"].(map[string]any); init["id"] != 1.0 || res["protocolVersion"] != "2024-11-05" {
		t.Fatalf("initialize: %v", init)
	}
	accepted(c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`), "initialized")

	accepted(c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"web_progress","arguments":{},"_meta":{"progressToken":"p-1"}}}`), "tools/call")
	for i := 1; i <= 3; i++ {
		m := c.message(t)
		if p, _ := m["params"].(map[string]any); m["method"] != "notifications/progress" || p["progressToken"] != "p-1" || p["progress"] != float64(i) {
			t.Fatalf("progress %d: %v", i, m)
		}
	}
	if m := c.message(t); m["id"] != 2.0 || !strings.Contains(fmt.Sprint(m["result"]), "web: done") {
		t.Fatalf("the call's answer: %v", m)
	}
	accepted(c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"web+test://web/0"}}`), "resources/read")
	read := c.message(t)
	if raw, _ := json.Marshal(read["result"]); read["id"] != 3.0 || !strings.Contains(string(raw), "web resource 0") || strings.Contains(string(raw), "resultType") {
		t.Fatalf("read: %v", read)
	}
	accepted(c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{"uri":"web+test://web/1"}}`), "subscribe")
	if m := c.message(t); m["id"] != 4.0 || m["result"] == nil {
		t.Fatalf("subscribe: %v", m)
	}
	eventually(t, 10*time.Second, func() error {
		updateUpstream(t, s, "test://web/1")
		select {
		case ev := <-c.events:
			if !strings.Contains(ev.Data, `"notifications/resources/updated"`) || !strings.Contains(ev.Data, "web+test://web/1") {
				return fmt.Errorf("event %+v", ev)
			}
			return nil
		case <-time.After(300 * time.Millisecond):
			return errors.New("no update on the stream yet")
		}
	})

	sid := c.endpoint.Query().Get("sessionId")
	asJSON := http.Header{"Content-Type": {"application/json"}}
	post(t, origin(b)+"/messages?sessionId=nope", asJSON, `{"jsonrpc":"2.0","id":5,"method":"ping"}`).wantError(t, 404, -32600)
	post(t, origin(b)+"/messages", asJSON, `{"jsonrpc":"2.0","id":5,"method":"ping"}`).wantError(t, 400, -32600)
	post(t, origin(b)+"/messages?sessionId="+sid, http.Header{"Content-Type": {"text/plain"}}, `{}`).wantError(t, 415, -32600)
	c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":6,"method":"ping"`).wantError(t, 400, -32700)
	c.close()
	eventually(t, 10*time.Second, func() error {
		if r := c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":7,"method":"ping"}`); r.Status != http.StatusNotFound {
			return fmt.Errorf("a POST after the stream closed: HTTP %d %s, want 404", r.Status, r.Body)
		}
		return nil
	})
}

// GET /mcp without a session, and the wrong methods on the transport's
// paths, are refused naming the transports and paths a host can use.
func TestSSEDownstreamNamedInRefusals(t *testing.T) {
	p, _ := legacyFixture(t, "")
	for _, c := range []struct{ method, path string }{{http.MethodGet, "/mcp"}, {http.MethodPost, "/sse"}, {http.MethodGet, "/messages"}} {
		r := do(t, c.method, origin(p)+c.path, http.Header{"Accept": {"text/event-stream"}}, "")
		if r.Status != http.StatusMethodNotAllowed || r.Error == nil || r.Header.Get("Allow") == "" {
			t.Fatalf("%s %s: HTTP %d %s, want 405 with Allow", c.method, c.path, r.Status, r.Body)
		}
		for _, want := range []string{"POST /mcp", "GET /sse", "POST /messages?sessionId="} {
			if !strings.Contains(r.Error.Message, want) {
				t.Errorf("%s %s: %q does not name %q", c.method, c.path, r.Error.Message, want)
			}
		}
	}
}

// With authentication, the stream and the POSTs need a token; a session
// belongs to the principal that opened it (another gets 404, and the
// session lives on); its streams count against the principal's share.
func TestSSEDownstreamBoundToPrincipal(t *testing.T) {
	is := newIssuer(t)
	_, _, p := hintedProxy(t, is.authYAML("")+"sessions: {max_per_principal: 1}\n")
	as := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	if s := rawStatus(t, http.MethodGet, origin(p)+"/sse", http.Header{"Accept": {"text/event-stream"}}, ""); s != http.StatusUnauthorized {
		t.Errorf("GET /sse without a token: HTTP %d, want 401", s)
	}
	c := openSSE(t, origin(p), as(alice))
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw-sse","version":"1"}}}`
	c.postTo(t, origin(p), as(bob), initialize).wantError(t, 404, -32600)
	if r := c.postTo(t, origin(p), nil, initialize); r.Status != http.StatusUnauthorized {
		t.Errorf("a POST without a token: HTTP %d, want 401", r.Status)
	}
	if r := c.postTo(t, origin(p), as(alice), initialize); r.Status != http.StatusAccepted {
		t.Fatalf("alice's initialize: HTTP %d %s", r.Status, r.Body)
	}
	if m := c.message(t); m["result"] == nil {
		t.Fatalf("alice's initialize: %v", m)
	}
	// Her share is one session: a second stream is refused, bob opens his.
	again := as(alice)
	again.Set("Accept", "text/event-stream")
	do(t, http.MethodGet, origin(p)+"/sse", again, "").wantError(t, http.StatusTooManyRequests, -32600)
	openSSE(t, origin(p), as(bob))
}

// A client that opens a stream and never reads it is ended, with its
// session, however many answers it makes Manifold produce.
func TestSSEDownstreamSlowReaderEnded(t *testing.T) {
	p, _ := legacyFixture(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, origin(p)+"/sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sse: %v %v", err, resp)
	}
	defer resp.Body.Close()
	// Only the endpoint is read; from then on, nothing: a hung client.
	br := bufio.NewReader(resp.Body)
	var endpoint string
	for endpoint == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			endpoint = origin(p) + strings.TrimSpace(d)
		}
	}
	h := http.Header{"Content-Type": {"application/json"}}
	post(t, endpoint, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw-sse","version":"1"}}}`)
	// 50 MB of answers: more than the stream's queue (8 MiB) and the
	// loopback socket buffers (at most 36 MB here) together could hold.
	big := strings.Repeat("x", 256<<10)
	for i := 2; ; i++ {
		if i == 200 {
			t.Fatal("50 MB of answers to a client that reads nothing, and its session lives on")
		}
		r := post(t, endpoint, h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"web_echo","arguments":{"text":%q}}}`, i, big))
		if r.Status == http.StatusNotFound {
			t.Logf("the stream and its session ended after %d answers", i-2)
			return
		}
		if r.Status != http.StatusAccepted && r.Status != http.StatusTooManyRequests {
			t.Fatalf("POST %d: HTTP %d %s", i, r.Status, r.Body)
		}
	}
}

// roundRobin is a load balancer in front of backends: each request goes
// to the next one, streams included.
func roundRobin(t *testing.T, backends ...*proxy) string {
	var proxies []*httputil.ReverseProxy
	for _, b := range backends {
		u, _ := url.Parse(origin(b))
		proxies = append(proxies, httputil.NewSingleHostReverseProxy(u))
	}
	var n atomic.Int64
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[int(n.Add(1))%len(proxies)].ServeHTTP(w, r)
	}))
	t.Cleanup(lb.Close)
	return lb.URL
}

// The go-sdk's SSEClientTransport, at its default revision (it falls back
// from server/discover to initialize) and pinned to 2024-11-05, behind a
// load balancer in front of two replicas: list, read, a tool call with
// progress, a subscription and its update.
func TestSSEDownstreamGoSDKClient(t *testing.T) {
	a, b, s := sseReplicas(t, "")
	lb := roundRobin(t, a, b)
	for _, version := range []string{"", "2024-11-05"} {
		t.Run("version="+version, func(t *testing.T) {
			updated, progress := make(chan string, 8), make(chan float64, 8)
			c := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-sse", Version: "1"}, &mcp.ClientOptions{
				ResourceUpdatedHandler:      func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params.Progress },
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs, err := c.Connect(ctx, &mcp.SSEClientTransport{Endpoint: lb + "/sse"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer cs.Close()
			want := version
			if want == "" {
				want = "2025-11-25" // the go-sdk's fallback from server/discover
			}
			if got := cs.InitializeResult().ProtocolVersion; got != want {
				t.Errorf("negotiated %s, want %s", got, want)
			}
			list, err := cs.ListResources(ctx, nil)
			if err != nil || !slices.ContainsFunc(list.Resources, func(r *mcp.Resource) bool { return r.URI == "web+test://web/0" }) {
				t.Fatalf("ListResources: %v %+v", err, list)
			}
			read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "web+test://web/0"})
			if err != nil || read.Contents[0].Text != "web resource 0" {
				t.Fatalf("ReadResource: %v %+v", err, read)
			}
			params := &mcp.CallToolParams{Name: "web_progress", Arguments: map[string]any{}}
			params.SetProgressToken("go-sdk-1")
			call, err := cs.CallTool(ctx, params)
			if err != nil || call.Content[0].(*mcp.TextContent).Text != "web: done" {
				t.Fatalf("CallTool: %v %+v", err, call)
			}
			for i := 1; i <= 3; i++ {
				if got := <-progress; got != float64(i) {
					t.Errorf("progress %v, want %d", got, i)
				}
			}
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "web+test://web/1"}); err != nil {
				t.Fatal(err)
			}
			awaitWebUpdate(t, s, updated)
		})
	}
}

// mcp-go's SSE client does the same.
func TestSSEDownstreamMcpGoClient(t *testing.T) {
	a, b, s := sseReplicas(t, "")
	c, err := mcpgoclient.NewSSEMCPClient(roundRobin(t, a, b) + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	updated, progress := make(chan string, 8), make(chan float64, 8)
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		switch n.Method {
		case "notifications/resources/updated":
			updated <- fmt.Sprint(n.Params.AdditionalFields["uri"])
		case "notifications/progress":
			p, _ := n.Params.AdditionalFields["progress"].(float64)
			progress <- p
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-sse", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	list, err := c.ListResources(ctx, mcpgo.ListResourcesRequest{})
	if err != nil || !slices.ContainsFunc(list.Resources, func(r mcpgo.Resource) bool { return r.URI == "web+test://web/0" }) {
		t.Fatalf("ListResources: %v %+v", err, list)
	}
	rr := mcpgo.ReadResourceRequest{}
	rr.Params.URI = "web+test://web/0"
	read, err := c.ReadResource(ctx, rr)
	if err != nil || read.Contents[0].(mcpgo.TextResourceContents).Text != "web resource 0" {
		t.Fatalf("ReadResource: %v %+v", err, read)
	}
	ct := mcpgo.CallToolRequest{}
	ct.Params.Name, ct.Params.Arguments = "web_progress", map[string]any{}
	ct.Params.Meta = &mcpgo.Meta{ProgressToken: "mcp-go-1"}
	call, err := c.CallTool(ctx, ct)
	if err != nil || call.Content[0].(mcpgo.TextContent).Text != "web: done" {
		t.Fatalf("CallTool: %v %+v", err, call)
	}
	for i := 1; i <= 3; i++ {
		if got := <-progress; got != float64(i) {
			t.Errorf("progress %v, want %d", got, i)
		}
	}
	sub := mcpgo.SubscribeRequest{}
	sub.Params.URI = "web+test://web/1"
	if err := c.Subscribe(ctx, sub); err != nil {
		t.Fatal(err)
	}
	awaitWebUpdate(t, s, updated)
}

// The TypeScript SDK v1's SSEClientTransport does the same, through the
// load balancer.
func TestSSEDownstreamTypeScriptClient(t *testing.T) {
	node := nodeOrSkip(t)
	script := tsScript(t, "sse-client.mjs")
	a, b, s := sseReplicas(t, "")
	lb := roundRobin(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, lb+"/sse")
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	steps := map[string]json.RawMessage{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var line struct {
			Step  string          `json:"step"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			t.Fatalf("client said %q", sc.Text())
		}
		steps[line.Step] = line.Value
		if line.Step == "subscribed" {
			go func() { // again until the client reports it, as awaitWebUpdate does
				for ctx.Err() == nil {
					updateUpstream(t, s, "test://web/1")
					time.Sleep(300 * time.Millisecond)
				}
			}()
		}
	}
	for step, want := range map[string]string{
		"version": `"manifold"`, "read": `"web resource 0"`, "call": `"web: done"`, "progress": `[1,2,3]`, "updated": `"web+test://web/1"`,
	} {
		if got := string(steps[step]); got != want {
			t.Errorf("%s: %s, want %s", step, got, want)
		}
	}
	if !strings.Contains(string(steps["resources"]), "web+test://web/0") {
		t.Errorf("resources: %s", steps["resources"])
	}
}

// A request runs on the replica that took its POST: the caller's
// cancellation sent to another replica reaches it, and so does the end of
// the session when its stream, held by the other replica, closes. The
// upstream is mcp-go's, which cancels a tool when its call's stream closes
// (see TestToolCancellationReachesUpstream).
func TestSSEDownstreamCancelAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	up := serveHTTP(t, mcpgoToolServer("mod", true))
	shared := fmt.Sprintf("cache: {secret: session-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL()) + httpUpstreamYAML("mod", up.URL)
	a, b := startProxy(t, shared), startProxy(t, shared)
	c := openSSE(t, origin(a), nil)
	c.postTo(t, origin(b), nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw-sse","version":"1"}}}`)
	c.message(t)
	waitOn := func(id int) int {
		t.Helper()
		started, cancelled := events.get(events.started, "mod"), events.get(events.cancelled, "mod")
		if r := c.postTo(t, origin(b), nil, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"mod_wait","arguments":{}}}`, id)); r.Status != http.StatusAccepted {
			t.Fatalf("tools/call: HTTP %d %s", r.Status, r.Body)
		}
		eventually(t, 10*time.Second, func() error {
			if events.get(events.started, "mod") == started {
				return errors.New("the upstream has not started the call yet")
			}
			return nil
		})
		return cancelled
	}
	cancelled := func(before int, what string) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			if events.get(events.cancelled, "mod") == before {
				return fmt.Errorf("%s: the upstream call is not cancelled", what)
			}
			return nil
		})
	}
	before := waitOn(2)
	if r := c.postTo(t, origin(a), nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`); r.Status != http.StatusAccepted {
		t.Fatalf("cancel: HTTP %d %s", r.Status, r.Body)
	}
	cancelled(before, "notifications/cancelled on the other replica")
	before = waitOn(3)
	c.close()
	cancelled(before, "the stream closed")
}

// Questions for the caller flow on the stream too: a modern upstream's
// input_required (the go-sdk's everything-server, stateless) is put to the
// go-sdk SSE client as sampling and elicitation requests, round after
// round, and its answers, POSTed to either replica behind the load
// balancer, reach the replica that asked.
func TestSSEDownstreamQuestionsAcrossReplicas(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(everythingBin, "-http", addr, "-stateless=true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	eventually(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/mcp")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	rs := redistest.Start(t)
	shared := fmt.Sprintf("namespace: none\ncache: {secret: session-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL()) + httpUpstreamYAML("everything", "http://"+addr+"/mcp")
	lb := roundRobin(t, startProxy(t, shared), startProxy(t, shared))
	var sampled, elicited atomic.Int32
	c := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-sse", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			sampled.Add(1)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "sampled text"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada", "color": "green"}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.SSEClientTransport{Endpoint: lb + "/sse"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for tool, want := range map[string]string{
		"test_input_required_result_elicitation": "Ada",
		"test_input_required_result_sampling":    "sampled text",
		"test_input_required_result_multi_round": "Ada likes green",
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
		if err != nil || res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, want) {
			t.Errorf("%s: %v %+v", tool, err, res)
		}
	}
	if sampled.Load() == 0 || elicited.Load() < 3 {
		t.Errorf("handlers called: sampling %d, elicitation %d", sampled.Load(), elicited.Load())
	}
}
