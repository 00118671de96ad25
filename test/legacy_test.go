package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	sdkjsonrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// Legacy callers (2025-11-25 and before) on the same /mcp as modern ones,
// driven by real, independent clients: the go-sdk client pinned to a legacy
// revision, and the mcp-go client.

// legacyUpstream is the go-sdk tool server "web" behind a prefix Manifold.
func legacyFixture(t *testing.T, extra string) (*proxy, *mcp.Server) {
	s := sdkToolServer("web", sdkOptions{resources: 2})
	up := serveHTTP(t, streamingSDK(s))
	return startProxy(t, extra+"upstreams:"+httpUpstreamYAML("web", up.URL)), s
}

// legacySDKClient connects the go-sdk client to url, pinned to version,
// with roots to expose.
func legacySDKClient(t *testing.T, url, version string, opts *mcp.ClientOptions, roots ...*mcp.Root) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "legacy-sdk-client", Version: "1"}, opts)
	c.AddRoots(roots...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect (%s): %v", version, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	return cs
}

// The go-sdk client pinned to 2025-11-25 and to 2025-06-18 lists, reads,
// subscribes and is told of an update, calls a tool, and gets -32002 for a
// missing resource.
func TestLegacyGoSDKClient(t *testing.T) {
	p, s := legacyFixture(t, "")
	for _, version := range []string{"2025-11-25", "2025-06-18"} {
		t.Run(version, func(t *testing.T) {
			updated := make(chan string, 8)
			cs := legacySDKClient(t, p.URL, version, &mcp.ClientOptions{
				ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
			})
			ctx := context.Background()
			caps := cs.InitializeResult().Capabilities
			if caps.Tools == nil || caps.Resources == nil || !caps.Resources.Subscribe {
				t.Errorf("initialize capabilities %+v", caps)
			}
			res, err := cs.ListResources(ctx, nil)
			if err != nil || len(res.Resources) == 0 {
				t.Fatalf("ListResources: %v %v", err, res)
			}
			read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "web+test://web/0"})
			if err != nil || read.Contents[0].Text != "web resource 0" {
				t.Fatalf("ReadResource: %v %+v", err, read)
			}
			call, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "web_echo", Arguments: map[string]any{"text": version}})
			if err != nil || call.Content[0].(*mcp.TextContent).Text != "web: "+version {
				t.Fatalf("CallTool: %v %+v", err, call)
			}
			_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "web+test://web/missing"})
			var werr *sdkjsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != -32002 {
				t.Errorf("a missing resource: %v, want -32002", err)
			}
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "web+test://web/1"}); err != nil {
				t.Fatal(err)
			}
			awaitWebUpdate(t, s, updated)
		})
	}
}

// The mcp-go client, pinned to 2025-11-25, does the same.
func TestLegacyMcpGoClient(t *testing.T) {
	p, s := legacyFixture(t, "")
	c, err := mcpgoclient.NewStreamableHttpClient(p.URL, mcpgotransport.WithContinuousListening())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	updated := make(chan string, 8)
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method == "notifications/resources/updated" {
			updated <- fmt.Sprint(n.Params.AdditionalFields["uri"])
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = "2025-11-25"
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-client", Version: "1"}
	ir, err := c.Initialize(ctx, init)
	if err != nil || ir.ProtocolVersion != "2025-11-25" {
		t.Fatalf("Initialize: %v %+v", err, ir)
	}
	list, err := c.ListResources(ctx, mcpgo.ListResourcesRequest{})
	if err != nil || len(list.Resources) == 0 {
		t.Fatalf("ListResources: %v", err)
	}
	rr := mcpgo.ReadResourceRequest{}
	rr.Params.URI = "web+test://web/0"
	read, err := c.ReadResource(ctx, rr)
	if err != nil || read.Contents[0].(mcpgo.TextResourceContents).Text != "web resource 0" {
		t.Fatalf("ReadResource: %v %+v", err, read)
	}
	ct := mcpgo.CallToolRequest{}
	ct.Params.Name, ct.Params.Arguments = "web_echo", map[string]any{"text": "mcp-go"}
	call, err := c.CallTool(ctx, ct)
	if err != nil || call.Content[0].(mcpgo.TextContent).Text != "web: mcp-go" {
		t.Fatalf("CallTool: %v %+v", err, call)
	}
	rr.Params.URI = "web+test://web/missing"
	if _, err := c.ReadResource(ctx, rr); err == nil || !strings.Contains(err.Error(), "-32002") && !errors.Is(err, mcpgo.ErrResourceNotFound) {
		t.Errorf("a missing resource: %v, want -32002", err)
	}
	sub := mcpgo.SubscribeRequest{}
	sub.Params.URI = "web+test://web/1"
	if err := c.Subscribe(ctx, sub); err != nil {
		t.Fatal(err)
	}
	awaitWebUpdate(t, s, updated)
}

// legacyPost sends one raw legacy request on session sid ("" for none).
func legacyPost(t *testing.T, url, sid, body string) *rawResponse {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	if sid != "" {
		h.Set("Mcp-Session-Id", sid)
	}
	return post(t, url, h, body)
}

func initialize(t *testing.T, url, version string) (sid string, r *rawResponse) {
	t.Helper()
	r = legacyPost(t, url, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, version))
	return r.Header.Get("Mcp-Session-Id"), r
}

// The session lifecycle and the legacy wire, on raw HTTP: version
// negotiation, the session id, 404 for an unknown, deleted or expired
// session, no 2026-only member in an answer, -32002 with HTTP 200, and
// modern requests on the same path at the same time.
func TestLegacySessionWire(t *testing.T) {
	p, _ := legacyFixture(t, "sessions: {idle_timeout: 1s}\n")
	for asked, want := range map[string]string{"2025-06-18": "2025-06-18", "2025-03-26": "2025-03-26", "2099-01-01": "2025-11-25"} {
		sid, r := initialize(t, p.URL, asked)
		var res struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		r.result(t, &res)
		if res.ProtocolVersion != want || len(sid) < 32 {
			t.Errorf("asked %s: got %s, session id %q", asked, res.ProtocolVersion, sid)
		}
	}
	sid, _ := initialize(t, p.URL, "2025-11-25")
	if r := legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.Status != 202 {
		t.Errorf("initialized: %d", r.Status)
	}
	r := legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"web+test://web/0"}}`)
	for _, modernOnly := range []string{"resultType", "ttlMs", "cacheScope", "io.modelcontextprotocol/serverInfo"} {
		if strings.Contains(string(r.Result), modernOnly) {
			t.Errorf("a legacy answer carries %s: %s", modernOnly, r.Result)
		}
	}
	r = legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"web+test://web/missing"}}`)
	if r.Status != 200 || r.Error == nil || r.Error.Code != -32002 || !strings.Contains(string(r.Error.Data), "web+test://web/missing") {
		t.Errorf("missing resource: HTTP %d %s", r.Status, r.Body)
	}
	if r := legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); string(r.Result) != "{}" {
		t.Errorf("ping: %s", r.Body)
	}
	if r := legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","id":5,"method":"server/discover"}`); r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("server/discover on a legacy session: %s", r.Body)
	}
	// A modern request on the same path meanwhile.
	if text := readText(t, p.URL, "web+test://web/0"); text != "web resource 0" {
		t.Errorf("modern read: %q", text)
	}
	legacyPost(t, p.URL, "no-such-session", `{"jsonrpc":"2.0","id":6,"method":"ping"}`).wantError(t, 404, -32600)
	del := do(t, http.MethodDelete, p.URL, http.Header{"Mcp-Session-Id": {sid}}, "")
	if del.Status != 200 {
		t.Errorf("DELETE: %d", del.Status)
	}
	legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","id":7,"method":"ping"}`).wantError(t, 404, -32600)
	idle, _ := initialize(t, p.URL, "2025-11-25")
	// Past idle_timeout (1s) and a sweep, by the process's clock; a poll
	// would use the session and keep it alive.
	time.Sleep(2500 * time.Millisecond)
	legacyPost(t, p.URL, idle, `{"jsonrpc":"2.0","id":8,"method":"ping"}`).wantError(t, 404, -32600)
}

// A session opened on one replica is served by another sharing its Redis,
// and a subscription made on the second reaches the GET stream held by the
// first.
func TestLegacySessionAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	s := sdkToolServer("web", sdkOptions{resources: 2})
	up := serveHTTP(t, streamingSDK(s))
	shared := fmt.Sprintf("cache: {secret: session-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL()) + httpUpstreamYAML("web", up.URL)
	a, b := startProxy(t, shared), startProxy(t, shared)
	sid, _ := initialize(t, a.URL, "2025-11-25")
	var call struct {
		Content []struct{ Text string } `json:"content"`
	}
	legacyPost(t, b.URL, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"web_echo","arguments":{"text":"b"}}}`).result(t, &call)
	if len(call.Content) == 0 || call.Content[0].Text != "web: b" {
		t.Fatalf("a call on replica b: %+v", call)
	}
	stream := openSessionStream(t, a.URL, sid)
	legacyPost(t, b.URL, sid, `{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"web+test://web/1"}}`)
	eventually(t, 10*time.Second, func() error {
		updateUpstream(t, s, "test://web/1")
		select {
		case m := <-stream:
			if !strings.Contains(m, `"notifications/resources/updated"`) || !strings.Contains(m, "web+test://web/1") {
				return fmt.Errorf("event %s", m)
			}
			return nil
		case <-time.After(300 * time.Millisecond):
			return errors.New("no update on replica a's stream yet")
		}
	})
	legacyPost(t, a.URL, sid, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
}

// openSessionStream opens a session's GET stream, with the extra headers
// given as name, value pairs; its events arrive on the channel until the
// test ends.
func openSessionStream(t *testing.T, url, sid string, extra ...string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET stream: %v %v", err, resp)
	}
	out := make(chan string, 64)
	go func() {
		defer resp.Body.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok {
					out <- d
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// A legacy client (the go-sdk pinned to 2025-11-25, its own multi round-trip
// handling off) calls the fixture's input_required tools on a modern
// upstream: Manifold asks the client as a 2025 server would, and its
// handlers are called, round after round.
func TestLegacyCallerBridgedToModernUpstream(t *testing.T) {
	p := fixtureProxy(t, true)
	var sampled, elicited atomic.Int32
	cs := legacySDKClient(t, p.URL, "2025-11-25", &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			sampled.Add(1)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "sampled text"}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada", "color": "green"}}, nil
		},
	}, &mcp.Root{URI: "file:///workspace", Name: "workspace"})
	ctx := context.Background()
	for tool, want := range map[string]string{
		"test_input_required_result_elicitation": "Ada",
		"test_input_required_result_sampling":    "sampled text",
		"test_input_required_result_list_roots":  "file:///workspace",
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

// fixtureProxy runs the go-sdk everything-server, modern (stateless) or
// legacy (sessions), behind a Manifold that passes names through.
func fixtureProxy(t *testing.T, stateless bool) *proxy {
	return startProxy(t, "namespace: none\nupstreams:"+httpUpstreamYAML("everything", everythingServer(t, stateless)))
}

// everythingServer runs the go-sdk everything-server and returns its URL.
func everythingServer(t *testing.T, stateless bool) string {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(everythingBin, "-http", addr, fmt.Sprintf("-stateless=%v", stateless))
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
	return "http://" + addr + "/mcp"
}

// A modern caller of a legacy upstream's tool that asks (sampling,
// elicitation) gets input_required; its retry with the answer resumes the
// held call, which completes. A tampered requestState is refused.
func TestModernCallerBridgedToLegacyUpstream(t *testing.T) {
	p := fixtureProxy(t, false)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{}}}`
	args := map[string]string{"test_sampling": `{"prompt":"hi"}`, "test_elicitation": `{"message":"who?"}`}
	call := func(id int, tool, extra string) map[string]json.RawMessage {
		t.Helper()
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s%s,%s}}`, id, tool, args[tool], extra, meta)
		var res map[string]json.RawMessage
		post(t, p.URL, headers("tools/call", tool), body).result(t, &res)
		return res
	}
	for tool, c := range map[string]struct{ answer, want string }{
		"test_sampling":    {`{"role":"assistant","model":"m","content":{"type":"text","text":"forty-two"}}`, "forty-two"},
		"test_elicitation": {`{"action":"accept","content":{"username":"ada","email":"ada@example.com"}}`, "accept"},
	} {
		first := call(1, tool, "")
		var rt string
		_ = json.Unmarshal(first["resultType"], &rt)
		var requests map[string]struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(first["inputRequests"], &requests)
		if rt != "input_required" || len(requests) != 1 {
			t.Fatalf("%s: first answer %v", tool, first)
		}
		var key string
		for k := range requests {
			key = k
		}
		var state string
		_ = json.Unmarshal(first["requestState"], &state)
		tampered := strings.Replace(state, "manifold.hold.", "manifold.hold.x", 1)
		r := post(t, p.URL, headers("tools/call", tool), fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":{},"requestState":%q,"inputResponses":{%q:%s},%s}}`, tool, tampered, key, c.answer, meta))
		r.wantError(t, 400, -32602)
		final := call(3, tool, fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:%s}`, state, key, c.answer))
		if !strings.Contains(string(final["content"]), c.want) {
			t.Errorf("%s: final answer %v", tool, final)
		}
		again := post(t, p.URL, headers("tools/call", tool), fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":%q,"arguments":{},"requestState":%q,"inputResponses":{%q:%s},%s}}`, tool, state, key, c.answer, meta))
		again.wantError(t, 400, -32602) // the hold ended with its answer
	}
}

// manifold stdio, launched by the go-sdk client's CommandTransport, serves
// both eras: a modern client and one pinned to 2025-11-25 list, read, call
// a tool and get the legacy not-found.
func TestStdioMode(t *testing.T) {
	s := sdkToolServer("web", sdkOptions{resources: 2})
	up := serveHTTP(t, streamingSDK(s))
	cfgPath := writeConfig(t, "upstreams:"+httpUpstreamYAML("web", up.URL))
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("version="+version, func(t *testing.T) {
			c := mcp.NewClient(&mcp.Implementation{Name: "stdio-host", Version: "1"}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var opts *mcp.ClientSessionOptions
			if version != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
			}
			cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(manifoldBin, "stdio", "--config", cfgPath)}, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if version != "" && cs.InitializeResult().ProtocolVersion != version {
				t.Errorf("negotiated %s", cs.InitializeResult().ProtocolVersion)
			}
			read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "web+test://web/0"})
			if err != nil || read.Contents[0].Text != "web resource 0" {
				t.Fatalf("ReadResource: %v", err)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "web_echo", Arguments: map[string]any{"text": "stdio"}})
			if err != nil || res.Content[0].(*mcp.TextContent).Text != "web: stdio" {
				t.Fatalf("CallTool: %v %+v", err, res)
			}
			_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "web+test://web/missing"})
			var werr *sdkjsonrpc.Error
			want := int64(-32602)
			if version != "" {
				want = -32002
			}
			if !errors.As(err, &werr) || werr.Code != want {
				t.Errorf("missing resource: %v, want %d", err, want)
			}
		})
	}
}

// awaitWebUpdate changes test://web/1 upstream until the subscriber hears
// of web+test://web/1 (its subscription reaches the upstream a moment
// after it was acknowledged).
func awaitWebUpdate(t *testing.T, s *mcp.Server, updated <-chan string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		updateUpstream(t, s, "test://web/1")
		select {
		case uri := <-updated:
			if uri != "web+test://web/1" {
				return fmt.Errorf("update of %s", uri)
			}
			return nil
		case <-time.After(300 * time.Millisecond):
			return errors.New("no update yet")
		}
	})
}
