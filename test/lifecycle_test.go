package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func readText(t testing.TB, url, uri string) string {
	t.Helper()
	var rr readResult
	post(t, url, headers("resources/read", uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))).result(t, &rr)
	if len(rr.Contents) == 0 {
		t.Fatalf("read %s: no contents", uri)
	}
	return rr.Contents[0].Text
}

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// A stdio upstream that crashes is restarted, and reads work again without
// any client action; the dead process's in-flight work fails cleanly.
func TestStdioUpstreamRestarted(t *testing.T) {
	p := startProxy(t, "upstreams:"+childUpstream("kid", "sdk:kid"))
	first, err := strconv.Atoi(readText(t, p.URL, "kid+test://kid/pid"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second int
	eventually(t, 15*time.Second, func() error {
		r := post(t, p.URL, headers("resources/read", "kid+test://kid/pid"), rpcBody(1, "resources/read", `"uri":"kid+test://kid/pid"`))
		if r.Error != nil {
			return fmt.Errorf("read after crash: %s", r.Body)
		}
		var rr readResult
		r.result(t, &rr)
		second, _ = strconv.Atoi(rr.Contents[0].Text)
		return nil
	})
	if second == first || second == 0 {
		t.Errorf("pid after restart %d, before %d", second, first)
	}
	if got := readText(t, p.URL, "kid+test://kid/1"); got != "kid resource 1" {
		t.Errorf("read after restart = %q", got)
	}
	logs := p.Logs.String()
	if !strings.Contains(logs, fmt.Sprintf("process %d exited (signal: killed)", first)) || !strings.Contains(logs, "restarting") || !strings.Contains(logs, "upstream=kid") {
		t.Errorf("restart not logged:\n%s", logs)
	}
	// The child's stderr reaches the log under its upstream's name.
	if !strings.Contains(logs, `msg="upstream stderr" upstream=kid line="child sdk:kid ready`) {
		t.Errorf("stderr not logged with the upstream name:\n%s", logs)
	}

	// On shutdown the process is stopped.
	p.stop()
	eventually(t, 10*time.Second, func() error {
		if processAlive(second) {
			return fmt.Errorf("child %d still running after shutdown", second)
		}
		return nil
	})
}

// A legacy HTTP upstream that forgets its session (it restarted) answers 404;
// Manifold initializes again and the caller never notices. On shutdown the
// session is ended with DELETE.
func TestLegacySessionRenewedAndDeleted(t *testing.T) {
	var generation atomic.Int32
	handlers := sync.Map{}
	handlerFor := func(gen int32) http.Handler {
		h, _ := handlers.LoadOrStore(gen, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
			return newSDKServer(fmt.Sprintf("legacy%d", gen), sdkOptions{resources: 1})
		}, nil))
		return h.(http.Handler)
	}
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlerFor(generation.Load()).ServeHTTP(w, r)
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("old", up.URL, "protocol: 2025-11-25"))
	if got := readText(t, p.URL, "old+test://legacy0/0"); got != "legacy0 resource 0" {
		t.Fatalf("first read = %q", got)
	}
	if up.Calls.get("initialize") != 1 {
		t.Fatalf("initialize calls = %d", up.Calls.get("initialize"))
	}
	generation.Add(1) // the server "restarts": every session is unknown
	if got := readText(t, p.URL, "old+test://legacy1/0"); got != "legacy1 resource 0" {
		t.Fatalf("read after the session vanished = %q", got)
	}
	if up.Calls.get("initialize") != 2 || up.Calls.get("notifications/initialized") != 2 {
		t.Errorf("initialize calls = %d, initialized = %d; want 2 each", up.Calls.get("initialize"), up.Calls.get("notifications/initialized"))
	}
	p.stop()
	if up.Calls.get("DELETE") != 1 {
		t.Errorf("DELETE calls on shutdown = %d, want 1", up.Calls.get("DELETE"))
	}
}

// A legacy caller that initializes while Manifold is between sessions
// with an upstream that forgot its session (its watch stream was cut and
// the server restarted) is told of that upstream's tools, as it last
// declared them: a legacy caller decides at initialize what it will ever
// ask, so leaving them out would hide them for its whole session.
func TestInitializeBetweenUpstreamSessions(t *testing.T) {
	var generation atomic.Int32
	var gone atomic.Int32 // requests answered 404 for a forgotten session
	handlers := sync.Map{}
	handlerFor := func(gen int32) http.Handler {
		h, _ := handlers.LoadOrStore(gen, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
			return sdkToolServer(fmt.Sprintf("legacy%d", gen), sdkOptions{resources: 1})
		}, nil))
		return h.(http.Handler)
	}
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		handlerFor(generation.Load()).ServeHTTP(rec, r)
		if rec.status == http.StatusNotFound {
			gone.Add(1)
		}
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("old", up.URL, "protocol: 2025-11-25"))
	if _, r := initialize(t, p.URL, "2025-11-25"); !strings.Contains(string(r.Result), `"tools"`) {
		t.Fatalf("first initialize: %s", r.Result)
	}
	eventually(t, 10*time.Second, func() error {
		if up.Calls.get("GET") == 0 {
			return fmt.Errorf("no watch stream yet")
		}
		return nil
	})
	generation.Add(1)
	up.srv.CloseClientConnections() // the watch's stream drops; its next GET meets the restarted server
	eventually(t, 10*time.Second, func() error {
		if gone.Load() == 0 || !strings.Contains(p.Logs.String(), "upstream watch down") {
			return fmt.Errorf("the watch has not found the session gone yet")
		}
		return nil
	})
	if _, r := initialize(t, p.URL, "2025-11-25"); !strings.Contains(string(r.Result), `"tools"`) {
		t.Errorf("initialize while the upstream renegotiates lacks its tools: %s", r.Result)
	}
}

// A legacy server that pings Manifold in the middle of a call gets its
// answer, and the call completes.
func TestLegacyServerPingAnswered(t *testing.T) {
	var pinged atomic.Bool
	s := newSDKServer("pinger", sdkOptions{})
	s.AddResource(&mcp.Resource{URI: "test://ping", Name: "ping"}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		if err := req.Session.Ping(ctx, nil); err != nil {
			return nil, fmt.Errorf("ping failed: %w", err)
		}
		pinged.Store(true)
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://ping", Text: "pong"}}}, nil
	})
	up := legacySDK(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("p", up.URL))
	if got := readText(t, p.URL, "p+test://ping"); got != "pong" || !pinged.Load() {
		t.Errorf("read = %q, pinged = %v", got, pinged.Load())
	}
}

// What the caller sends that the upstream should see arrives: the headers
// named in forward_headers, clientInfo, trace context and progressToken in
// `_meta`; configured headers too. Headers not named are not forwarded.
func TestForwardedContext(t *testing.T) {
	var mu sync.Mutex
	var seen struct {
		auth, other, static string
		meta                mcp.Meta
		clientName          string
	}
	s := newSDKServer("fwd", sdkOptions{})
	s.AddResource(&mcp.Resource{URI: "test://echo", Name: "echo"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		mu.Lock()
		defer mu.Unlock()
		seen.auth = req.Extra.Header.Get("Authorization")
		seen.other = req.Extra.Header.Get("X-Other")
		seen.static = req.Extra.Header.Get("X-Static")
		seen.meta = req.Params.Meta
		if ci := req.ClientInfo(); ci != nil {
			seen.clientName = ci.Name
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://echo", Text: "ok"}}}, nil
	})
	up := modernSDK(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("f", up.URL, `headers: {X-Static: configured}`, `forward_headers: [Authorization]`))
	h := headers("resources/read", "f+test://echo")
	h.Set("Authorization", "Bearer caller-token")
	h.Set("X-Other", "not forwarded")
	body := `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"f+test://echo","_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"the-caller","version":"9"},` +
		`"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v","baggage":"b=1","progressToken":"tok-1"}}}`
	var rr readResult
	post(t, p.URL, h, body).result(t, &rr)
	mu.Lock()
	defer mu.Unlock()
	if seen.auth != "Bearer caller-token" || seen.other != "" || seen.static != "configured" {
		t.Errorf("headers at the upstream: Authorization=%q X-Other=%q X-Static=%q", seen.auth, seen.other, seen.static)
	}
	if seen.clientName != "the-caller" {
		t.Errorf("clientInfo at the upstream = %q", seen.clientName)
	}
	for k, want := range map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v", "baggage": "b=1", "progressToken": "tok-1"} {
		if got := fmt.Sprint(seen.meta[k]); got != want {
			t.Errorf("_meta[%s] at the upstream = %q, want %q", k, got, want)
		}
	}
	if caps := fmt.Sprint(seen.meta["io.modelcontextprotocol/clientCapabilities"]); !strings.Contains(caps, "elicitation") {
		t.Errorf("clientCapabilities at the upstream = %s", caps)
	}
}

// An input_required result passes through untouched but for its
// requestState, sealed for its caller, and the retry with inputResponses
// and that requestState reaches the same upstream with its own state.
func TestInputRequiredPassesThrough(t *testing.T) {
	var gotState atomic.Value
	var gotResponses atomic.Value
	s := newSDKServer("mrtr", sdkOptions{})
	s.AddResource(&mcp.Resource{URI: "test://ask", Name: "ask"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		if req.Params.RequestState == "" {
			return &mcp.ReadResourceResult{
				InputRequests: mcp.InputRequestMap{"q1": &mcp.ElicitParams{Message: "which one?", RequestedSchema: map[string]any{"type": "object"}}},
				RequestState:  "opaque-state-7",
			}, nil
		}
		gotState.Store(req.Params.RequestState)
		gotResponses.Store(fmt.Sprint(len(req.Params.InputResponses)))
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://ask", Text: "answered"}}}, nil
	})
	up := modernSDK(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("m", up.URL))
	h := headers("resources/read", "m+test://ask")
	metaElicit := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	r := post(t, p.URL, h, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"m+test://ask",`+metaElicit+`}}`)
	var first struct {
		ResultType    string         `json:"resultType"`
		RequestState  string         `json:"requestState"`
		InputRequests map[string]any `json:"inputRequests"`
		TTLms         *int           `json:"ttlMs"`
	}
	r.result(t, &first)
	if first.ResultType != "input_required" || !strings.HasPrefix(first.RequestState, "manifold.pass.") || first.InputRequests["q1"] == nil {
		t.Fatalf("first answer = %s", r.Result)
	}
	// Untouched: apart from Manifold's serverInfo and the requestState it
	// seals for its caller (passstate_test.go), the result is exactly what
	// the upstream answers when asked directly.
	direct := post(t, up.URL, headers("resources/read", "test://ask"), `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"test://ask",`+metaElicit+`}}`)
	var viaProxy, fromUpstream map[string]json.RawMessage
	_ = json.Unmarshal(r.Result, &viaProxy)
	_ = json.Unmarshal(direct.Result, &fromUpstream)
	for _, m := range []map[string]json.RawMessage{viaProxy, fromUpstream} {
		delete(m, "_meta")
		delete(m, "requestState")
	}
	if a, b := mustJSON(viaProxy), mustJSON(fromUpstream); a != b {
		t.Errorf("input_required result changed on the way:\n proxy    %s\n upstream %s", a, b)
	}
	retry := `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"m+test://ask","requestState":"` + first.RequestState + `",` +
		`"inputResponses":{"q1":{"action":"accept","content":{}}},` + metaElicit + `}}`
	var rr readResult
	post(t, p.URL, h, retry).result(t, &rr)
	if rr.Contents[0].Text != "answered" || gotState.Load() != "opaque-state-7" || gotResponses.Load() != "1" {
		t.Errorf("retry: contents %+v, upstream saw state %v and %v responses", rr.Contents, gotState.Load(), gotResponses.Load())
	}
}

// Without namespaces, URIs pass through; a URI two upstreams list is read
// from the first in configuration order, deterministically, and the
// collision is logged. Unlisted URIs are tried in order.
func TestNoNamespaceCollisions(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 1}))
	beta := mcpgoLegacy(t, "beta", 1)
	for _, order := range [][2]string{{"alpha", "beta"}, {"beta", "alpha"}} {
		t.Run(order[0]+"-first", func(t *testing.T) {
			urls := map[string]string{"alpha": alpha.URL, "beta": beta.URL}
			p := startProxy(t, "namespace: none\nupstreams:"+httpUpstreamYAML(order[0], urls[order[0]])+httpUpstreamYAML(order[1], urls[order[1]]))
			// Before any list: tried in order, the first that has it answers.
			if got := readText(t, p.URL, "test://shared"); got != "shared from "+order[0] {
				t.Errorf("unlisted shared URI read = %q", got)
			}
			pages := listAll(t, p.URL, "resources/list")
			got := uris(pages)
			n := 0
			for _, u := range got {
				if u == "test://shared" {
					n++
				}
			}
			if n != 1 {
				t.Errorf("test://shared listed %d times in %v", n, got)
			}
			if got := readText(t, p.URL, "test://shared"); got != "shared from "+order[0] {
				t.Errorf("shared URI read = %q, want the first upstream's", got)
			}
			// URIs only one upstream has reach it, either way.
			if got := readText(t, p.URL, "test://alpha/0"); got != "alpha resource 0" {
				t.Errorf("alpha's URI = %q", got)
			}
			if got := readText(t, p.URL, "test://beta/0"); got != "beta resource 0" {
				t.Errorf("beta's URI = %q", got)
			}
			if !strings.Contains(p.Logs.String(), "two upstreams list the same") {
				t.Errorf("collision not logged")
			}
			post(t, p.URL, headers("resources/read", "test://nowhere"), rpcBody(1, "resources/read", `"uri":"test://nowhere"`)).wantError(t, http.StatusBadRequest, -32602)
		})
	}
}

// mustJSON re-encodes v canonically (sorted keys, compact).
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var any any
	_ = json.Unmarshal(b, &any)
	b, _ = json.Marshal(any)
	return string(b)
}

func killProcess(t testing.TB, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// Progress from a stdio upstream reaches the caller that asked for it, as
// SSE before the answer, with the caller's own token, even when two callers
// chose the same token and share the upstream's one channel.
func TestStdioProgressReachesItsCaller(t *testing.T) {
	p := startProxy(t, "upstreams:"+childUpstream("kid", "sdk:kid"))
	readText(t, p.URL, "kid+test://kid/0")
	var wg sync.WaitGroup
	for _, x := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uri := "kid+test://kid/progress/" + x
			meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"same"}`
			r := post(t, p.URL, headers("resources/read", uri), fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":%q,%s}}`, uri, meta))
			if r.Header.Get("Content-Type") != "text/event-stream" {
				t.Errorf("%s: answered %s without streaming progress", x, r.Header.Get("Content-Type"))
				return
			}
			got := 0
			for _, line := range strings.Split(string(r.Body), "\n") {
				if !strings.Contains(line, "notifications/progress") {
					continue
				}
				got++
				if !strings.Contains(line, `"progressToken":"same"`) || !strings.Contains(line, "/progress/"+x) {
					t.Errorf("caller %s got %s", x, line)
				}
			}
			if got != 3 {
				t.Errorf("caller %s got %d progress notifications, want 3:\n%s", x, got, r.Body)
			}
		}()
	}
	wg.Wait()
}

// statusRecorder keeps the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
