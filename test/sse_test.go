package test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
)

// sseServer is a 2024-11-05 HTTP+SSE server written by others, which the
// test can tell of a resource change, and kill and start again on the same
// address.
type sseServer struct {
	url    string // the SSE endpoint
	prefix string // the text of its resources: "<prefix> resource N"
	update func(t *testing.T, uri string)
	down   func()
	up     func()
}

// mcpgoSSE is mcp-go v1.2.1's server.NewSSEServer over a go MCP server
// with a resource, a template (test://go/missing is not found), echo and
// progress tools.
func mcpgoSSE(t *testing.T) *sseServer {
	s := mcpgoserver.NewMCPServer("mcpgo-sse", "1.0.0", mcpgoserver.WithResourceCapabilities(true, true), mcpgoserver.WithToolCapabilities(true))
	s.AddResource(mcpgo.NewResource("test://go/0", "zero"), func(context.Context, mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: "test://go/0", Text: "go resource 0"}}, nil
	})
	s.AddTool(mcpgo.NewTool("echo", mcpgo.WithString("text")), func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("go: " + req.GetString("text", "")), nil
	})
	s.AddTool(mcpgo.NewTool("progress"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		srv := mcpgoserver.ServerFromContext(ctx)
		for i := 1; i <= 3; i++ {
			if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
				_ = srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": i, "total": 3, "message": "go"})
			}
			time.Sleep(20 * time.Millisecond) // the progress is spread in time, ahead of the answer
		}
		return mcpgo.NewToolResultText("go: done"), nil
	})
	s.AddTool(mcpgo.NewTool("wait"), func(ctx context.Context, _ mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		waitForCancel(ctx, "gosse")
		return mcpgo.NewToolResultText("go: waited"), nil
	})
	sw := newSwitchable(t, mcpgoserver.NewSSEServer(s))
	return &sseServer{
		url: "http://" + sw.addr + "/sse", prefix: "go", down: sw.down, up: sw.up,
		update: func(_ *testing.T, uri string) {
			s.SendNotificationToAllClients("notifications/resources/updated", map[string]any{"uri": uri})
		},
	}
}

// tsSSE runs test/ts/sse-server.mjs, the TypeScript SDK v1's
// SSEServerTransport, on Node 22.
func tsSSE(t *testing.T) *sseServer {
	node := nodeOrSkip(t)
	script := tsScript(t, "sse-server.mjs")
	port := freePort(t)
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(node, script, fmt.Sprint(port))
		cmd.Stderr = testWriter{t}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); !strings.HasPrefix(line, "listening") {
			t.Fatalf("the TypeScript server said %q", line)
		}
	}
	stop := func() {
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			cmd = nil
		}
	}
	start()
	t.Cleanup(stop)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	return &sseServer{
		url: base + "/sse", prefix: "ts", down: stop, up: start,
		update: func(t *testing.T, uri string) {
			resp, err := http.Get(base + "/update?uri=" + uri)
			if err == nil {
				resp.Body.Close()
			}
		},
	}
}

// Behind Manifold, a 2024-11-05 server of each SDK lists, reads, answers a
// missing resource with the modern not-found, has a subscription's update
// passed on, runs a tool with progress, and is used again after being
// killed and started again.
func TestSSEUpstreams(t *testing.T) {
	for _, mk := range []func(*testing.T) *sseServer{mcpgoSSE, tsSSE} {
		s := mk(t)
		t.Run(s.prefix, func(t *testing.T) { exerciseSSE(t, s) })
		t.Run(s.prefix+" found by transport auto", func(t *testing.T) {
			p := startProxy(t, "upstreams:"+httpUpstreamYAML("old", s.url))
			zero := fmt.Sprintf("old+test://%s/0", s.prefix)
			if text := readText(t, p.URL, zero); text != s.prefix+" resource 0" {
				t.Errorf("read: %q", text)
			}
			if !strings.Contains(p.Logs.String(), "speaking the 2024-11-05 HTTP+SSE transport") || !strings.Contains(p.Logs.String(), "transport=sse") {
				t.Errorf("the log does not say which transport was found:\n%s", p.Logs)
			}
		})
	}
}

func exerciseSSE(t *testing.T, s *sseServer) {
	p := startProxy(t, "subscriptions: {keepalive: 1s}\nupstreams:"+httpUpstreamYAML("old", s.url, "transport: sse", "timeout: 5s"))
	zero := fmt.Sprintf("old+test://%s/0", s.prefix)
	if got := uris(listAll(t, p.URL, "resources/list")); !strings.Contains(fmt.Sprint(got), zero) {
		t.Errorf("resources/list: %v", got)
	}
	if text := readText(t, p.URL, zero); text != s.prefix+" resource 0" {
		t.Errorf("read: %q", text)
	}
	missing := fmt.Sprintf("old+test://%s/missing", s.prefix)
	if r := post(t, p.URL, headers("resources/read", missing), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, missing))); r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("missing resource: %s", r.Body)
	}
	call := post(t, p.URL, headers("tools/call", "old_progress"), `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"old_progress","arguments":{},`+
		`"_meta":{"progressToken":"p1","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if n := strings.Count(string(call.Body), `"notifications/progress"`); n != 3 || !strings.Contains(string(call.Body), s.prefix+": done") {
		t.Errorf("tools/call with progress: %d progress events in %s", n, call.Body)
	}
	{
		st := listen(t, p.URL, 3, fmt.Sprintf(`{"resourceSubscriptions":[%q]}`, zero))
		st.next(t, 5*time.Second)
		got := make(chan struct{})
		go func() {
			st.expect(t, 3, "notifications/resources/updated", zero)
			close(got)
		}()
		eventually(t, 10*time.Second, func() error {
			s.update(t, fmt.Sprintf("test://%s/0", s.prefix))
			select {
			case <-got:
				return nil
			case <-time.After(300 * time.Millisecond):
				return fmt.Errorf("no update for %s", zero)
			}
		})
	}
	s.down()
	if r := post(t, p.URL, headers("resources/read", zero), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, zero))); r.Error == nil {
		t.Errorf("read with the server down: %s", r.Body)
	}
	s.up()
	eventually(t, 15*time.Second, func() error {
		r := post(t, p.URL, headers("resources/read", zero), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, zero)))
		if r.Error != nil {
			return fmt.Errorf("after the restart: %s", r.Body)
		}
		return nil
	})
}

// Many calls share the one stream, each answered by its own id; a call that
// outlives its call_timeout fails in time, and the server is told to stop
// (notifications/cancelled, posted to the endpoint).
func TestSSEConcurrentCallsAndTimeout(t *testing.T) {
	s := mcpgoSSE(t)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("old", s.url, "transport: sse", "call_timeout: 1s"))
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			text := fmt.Sprintf("call-%d", i)
			var res struct {
				Content []struct{ Text string } `json:"content"`
			}
			post(t, p.URL, headers("tools/call", "old_echo"), rpcBody(i, "tools/call", fmt.Sprintf(`"name":"old_echo","arguments":{"text":%q}`, text))).result(t, &res)
			if len(res.Content) != 1 || res.Content[0].Text != "go: "+text {
				t.Errorf("call %d answered %+v", i, res)
			}
		})
	}
	wg.Wait()
	start := time.Now()
	if r := post(t, p.URL, headers("tools/call", "old_wait"), rpcBody(1, "tools/call", `"name":"old_wait","arguments":{}`)); r.Error == nil {
		t.Errorf("a call past its timeout: %s", r.Body)
	}
	// A bounded wait: the call ends at its 1 s call_timeout, not when the
	// tool would (20 s).
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call past its 1s timeout took %v", d)
	}
	eventually(t, 5*time.Second, func() error {
		if events.get(events.cancelled, "gosse") == 0 {
			return fmt.Errorf("the server was not told the call was cancelled")
		}
		return nil
	})
}

// A Streamable HTTP server that answers 404 for a moment (a rollout, an
// ingress reloading) is not pinned to the HTTP+SSE transport: the fallback
// is kept only if an SSE stream opens, and the next negotiation speaks
// Streamable HTTP again. A server with its protocol pinned to 2024-11-05
// under transport auto falls back too.
func TestSSEFallbackOnlyWhenAStreamOpens(t *testing.T) {
	var refused atomic.Int32
	h := modernHandler(newSDKServer("flaky", sdkOptions{resources: 1}))
	flaky := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refused.Add(1) <= 4 {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("flaky", flaky.URL))
	eventually(t, 15*time.Second, func() error {
		r := post(t, p.URL, headers("resources/read", "flaky+test://flaky/0"), rpcBody(1, "resources/read", `"uri":"flaky+test://flaky/0"`))
		if r.Error != nil {
			return fmt.Errorf("read: %s", r.Body)
		}
		return nil
	})
	if logs := p.Logs.String(); strings.Contains(logs, "speaking the 2024-11-05") || !strings.Contains(logs, "transport=http") {
		t.Errorf("a passing 404 pinned the transport:\n%s", logs)
	}
	s := mcpgoSSE(t)
	q := startProxy(t, "upstreams:"+httpUpstreamYAML("old", s.url, "protocol: 2024-11-05"))
	if text := readText(t, q.URL, "old+test://go/0"); text != "go resource 0" {
		t.Errorf("pinned 2024-11-05 under transport auto: %q", text)
	}
}
