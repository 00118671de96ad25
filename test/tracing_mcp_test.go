package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// gotSpan is a span as an exporter sent it, whichever: OTLP or the
// console's JSON lines.
type gotSpan struct {
	Name, TraceID, SpanID, Parent, Kind string
	Attrs                               map[string]string
	Error                               bool
	Status                              string
}

// spanSource is where a test reads the spans a process exported.
type spanSource func() []gotSpan

func otlpSpans(r *otlpReceiver) spanSource {
	kinds := map[tracepb.Span_SpanKind]string{tracepb.Span_SPAN_KIND_SERVER: "server", tracepb.Span_SPAN_KIND_CLIENT: "client", tracepb.Span_SPAN_KIND_INTERNAL: "internal"}
	return func() []gotSpan {
		r.mu.Lock()
		defer r.mu.Unlock()
		var out []gotSpan
		for _, s := range r.spans {
			g := gotSpan{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
				Parent: hex.EncodeToString(s.GetParentSpanId()), Kind: kinds[s.GetKind()], Attrs: map[string]string{},
				Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Status: s.GetStatus().GetMessage()}
			for _, kv := range s.GetAttributes() {
				v := kv.GetValue()
				switch {
				case v.GetStringValue() != "":
					g.Attrs[kv.GetKey()] = v.GetStringValue()
				default:
					g.Attrs[kv.GetKey()] = strings.TrimPrefix(strings.TrimPrefix(v.String(), "int_value:"), "bool_value:")
				}
			}
			out = append(out, g)
		}
		return out
	}
}

// consoleSpans reads the spans OTEL_TRACES_EXPORTER=console printed on
// stderr, one JSON object a line, among the log lines.
func consoleSpans(logs *logBuffer) spanSource {
	kinds := map[int]string{1: "internal", 2: "server", 3: "client"}
	return func() []gotSpan {
		var out []gotSpan
		for _, line := range strings.Split(logs.String(), "\n") {
			if !strings.HasPrefix(line, `{"Name":`) {
				continue
			}
			var s struct {
				Name        string
				SpanContext struct{ TraceID, SpanID string }
				Parent      struct{ SpanID string }
				SpanKind    int
				Attributes  []struct {
					Key   string
					Value struct{ Value any }
				}
				Status struct{ Code, Description string }
			}
			if json.Unmarshal([]byte(line), &s) != nil {
				continue
			}
			g := gotSpan{Name: s.Name, TraceID: s.SpanContext.TraceID, SpanID: s.SpanContext.SpanID, Parent: s.Parent.SpanID,
				Kind: kinds[s.SpanKind], Attrs: map[string]string{}, Error: s.Status.Code == "Error", Status: s.Status.Description}
			if g.Parent == "0000000000000000" {
				g.Parent = ""
			}
			for _, a := range s.Attributes {
				g.Attrs[a.Key] = fmt.Sprint(a.Value.Value)
			}
			out = append(out, g)
		}
		return out
	}
}

// find waits for the span of trace named name that keep admits.
func (src spanSource) find(t *testing.T, traceID, name string, keep func(gotSpan) bool) gotSpan {
	t.Helper()
	var found gotSpan
	eventually(t, 15*time.Second, func() error {
		spans := src()
		for _, s := range spans {
			if s.TraceID == traceID && s.Name == name && (keep == nil || keep(s)) {
				found = s
				return nil
			}
		}
		var names []string
		for _, s := range spans {
			if s.TraceID == traceID {
				names = append(names, s.Kind+":"+s.Name)
			}
		}
		return fmt.Errorf("no span %q in trace %s; it has %v", name, traceID, names)
	})
	return found
}

func kind(k string) func(gotSpan) bool { return func(s gotSpan) bool { return s.Kind == k } }

// hops records the traceparent header each upstream request came with, by
// its Mcp-Method.
type hops struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (h *hops) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		if h.seen == nil {
			h.seen = map[string][]string{}
		}
		m := r.Header.Get("Mcp-Method")
		h.seen[m] = append(h.seen[m], r.Header.Get("traceparent"))
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// reached reports whether a request of method reached the upstream with the
// context of span (trace and span id).
func (h *hops) reached(method, traceID, span string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tp := range h.seen[method] {
		if tp == "00-"+traceID+"-"+span+"-01" {
			return true
		}
	}
	return false
}

// tracedServer is the hinted server with the sleep tool, a tool that
// reports an error in its result, and a prompt.
func tracedServer() *hintedServer {
	h := sleepyServer()
	mcp.AddTool(h.Server, &mcp.Tool{Name: "fail"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it went wrong"}}}, nil, nil
	})
	h.AddPrompt(&mcp.Prompt{Name: "greet"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello"}}}}, nil
	})
	return h
}

// Spans speak MCP, as the OpenTelemetry MCP and GenAI conventions name it,
// whether exported over OTLP or printed on the console: a read, a tool
// call, a prompt, a failure, a listen and a legacy session's requests,
// each a server span under the caller's context, with a cache lookup and
// an upstream call under it, whose context reaches the upstream.
func TestTracingSpeaksMCP(t *testing.T) {
	for _, exporter := range []string{"otlp", "console"} {
		t.Run(exporter, func(t *testing.T) {
			h := tracedServer()
			hp := &hops{}
			up := serveHTTP(t, hp.wrap(modernHandler(h.Server)))
			env := []string{"OTEL_TRACES_EXPORTER=" + exporter, "OTEL_BSP_SCHEDULE_DELAY=100"}
			var src spanSource
			var o *opsProcess
			if exporter == "otlp" {
				recv := startOTLPHTTP(t)
				o = startOps(t, "upstreams:"+httpUpstreamYAML("a", up.URL), append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.Endpoint)...)
				src = otlpSpans(recv)
			} else {
				o = startOps(t, "upstreams:"+httpUpstreamYAML("a", up.URL), env...)
				src = consoleSpans(o.Logs)
			}
			o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
			checkMCPRead(t, o, src, hp)
			checkMCPTool(t, o, src, hp)
			checkMCPPromptAndFailures(t, o, src, hp)
			checkMCPListen(t, o, src)
			checkMCPLegacy(t, o, src)
		})
	}
}

// traced sends body to /mcp with hdr and a traceparent header of a new
// trace, and returns the trace and the caller's span.
func traced(t *testing.T, o *opsProcess, hdr http.Header, body string) (traceID, caller string, r *rawResponse) {
	traceID, caller = randomHex(16), randomHex(8)
	hdr.Set("traceparent", "00-"+traceID+"-"+caller+"-01")
	return traceID, caller, post(t, o.MCP, hdr, body)
}

func wantAttrs(t *testing.T, s gotSpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := s.Attrs[k]; !ok || got != v {
			t.Errorf("%s span %q: %s = %q (present %v), want %q; all %v", s.Kind, s.Name, k, got, ok, v, s.Attrs)
		}
	}
}

func checkMCPRead(t *testing.T, o *opsProcess, src spanSource, hp *hops) {
	tid, caller, r := traced(t, o, headers("resources/read", "a+test://pub/t1"), rpcBody(1, "resources/read", `"uri":"a+test://pub/t1"`))
	if r.Error != nil {
		t.Fatalf("read: %s", r.Body)
	}
	server := src.find(t, tid, "resources/read", kind("server"))
	if server.Parent != caller {
		t.Errorf("read's server span: parent %s, want the caller's %s", server.Parent, caller)
	}
	wantAttrs(t, server, map[string]string{"mcp.method.name": "resources/read", "mcp.protocol.version": "2026-07-28", "mcp.resource.uri": "a+test://pub/t1"})
	lookup := src.find(t, tid, "cache.lookup", nil)
	if lookup.Parent != server.SpanID {
		t.Errorf("cache.lookup: parent %s, want %s", lookup.Parent, server.SpanID)
	}
	wantAttrs(t, lookup, map[string]string{"manifold.cache.tier": "upstream", "manifold.upstream": "a"})
	client := src.find(t, tid, "resources/read", kind("client"))
	if client.Parent != lookup.SpanID {
		t.Errorf("upstream call: parent %s, want the lookup's %s", client.Parent, lookup.SpanID)
	}
	wantAttrs(t, client, map[string]string{"mcp.method.name": "resources/read", "manifold.upstream": "a", "mcp.protocol.version": "2026-07-28",
		"mcp.resource.uri": "test://pub/t1", "network.transport": "tcp", "server.address": "127.0.0.1"})
	if !hp.reached("resources/read", tid, client.SpanID) {
		t.Errorf("the upstream did not receive the call span's context")
	}
	// A hit: the lookup says which tier answered.
	tid, _, _ = traced(t, o, headers("resources/read", "a+test://pub/t1"), rpcBody(2, "resources/read", `"uri":"a+test://pub/t1"`))
	wantAttrs(t, src.find(t, tid, "cache.lookup", nil), map[string]string{"manifold.cache.tier": "memory"})
}

func checkMCPTool(t *testing.T, o *opsProcess, src spanSource, hp *hops) {
	tid, caller, r := traced(t, o, headers("tools/call", "a_sleep"), rpcBody(3, "tools/call", `"name":"a_sleep","arguments":{"ms":1}`))
	if r.Error != nil {
		t.Fatalf("tool call: %s", r.Body)
	}
	server := src.find(t, tid, "tools/call a_sleep", kind("server"))
	if server.Parent != caller {
		t.Errorf("tool call's server span: parent %s, want %s", server.Parent, caller)
	}
	wantAttrs(t, server, map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "a_sleep", "gen_ai.operation.name": "execute_tool"})
	client := src.find(t, tid, "tools/call sleep", kind("client"))
	if client.Parent != server.SpanID {
		t.Errorf("tool's upstream call: parent %s, want %s", client.Parent, server.SpanID)
	}
	wantAttrs(t, client, map[string]string{"gen_ai.tool.name": "sleep", "gen_ai.operation.name": "execute_tool", "manifold.upstream": "a"})
	if !hp.reached("tools/call", tid, client.SpanID) {
		t.Errorf("the upstream did not receive the tool call span's context")
	}
}

func checkMCPPromptAndFailures(t *testing.T, o *opsProcess, src spanSource, hp *hops) {
	tid, _, r := traced(t, o, headers("prompts/get", "a_greet"), rpcBody(4, "prompts/get", `"name":"a_greet"`))
	if r.Error != nil {
		t.Fatalf("prompt: %s", r.Body)
	}
	server := src.find(t, tid, "prompts/get a_greet", kind("server"))
	wantAttrs(t, server, map[string]string{"mcp.method.name": "prompts/get", "gen_ai.prompt.name": "a_greet"})
	if _, ok := server.Attrs["gen_ai.operation.name"]; ok {
		t.Errorf("a prompt is not a tool execution: %v", server.Attrs)
	}
	client := src.find(t, tid, "prompts/get greet", kind("client"))
	if client.Parent != server.SpanID || !hp.reached("prompts/get", tid, client.SpanID) {
		t.Errorf("prompt's upstream call: parent %s, want %s; context reached the upstream: %v", client.Parent, server.SpanID, hp.reached("prompts/get", tid, client.SpanID))
	}

	// A JSON-RPC error: error.type and the status code are its code.
	tid, _, r = traced(t, o, headers("resources/read", "zz+test://x"), rpcBody(5, "resources/read", `"uri":"zz+test://x"`))
	if r.Error == nil {
		t.Fatalf("read of an unknown upstream answered %s", r.Body)
	}
	code := strconv.Itoa(int(r.Error.Code))
	failed := src.find(t, tid, "resources/read", kind("server"))
	wantAttrs(t, failed, map[string]string{"error.type": code, "rpc.response.status_code": code})
	if !failed.Error || failed.Status != r.Error.Message {
		t.Errorf("failed span: error status %v %q, want the error's message %q", failed.Error, failed.Status, r.Error.Message)
	}
	// A tool that reports an error in its result: error.type tool_error.
	tid, _, _ = traced(t, o, headers("tools/call", "a_fail"), rpcBody(6, "tools/call", `"name":"a_fail","arguments":{}`))
	wantAttrs(t, src.find(t, tid, "tools/call a_fail", kind("server")), map[string]string{"error.type": "tool_error"})
	wantAttrs(t, src.find(t, tid, "tools/call fail", kind("client")), map[string]string{"error.type": "tool_error"})
}

func checkMCPListen(t *testing.T, o *opsProcess, src spanSource) {
	tid, caller := randomHex(16), randomHex(8)
	st := listen(t, o.MCP, 9, `{"resourceSubscriptions":["a+test://pub/1"]}`, "traceparent", "00-"+tid+"-"+caller+"-01")
	st.expect(t, 9, "notifications/subscriptions/acknowledged", "")
	// Exported while the stream is still open: the span ends with the
	// acknowledgment.
	server := src.find(t, tid, "subscriptions/listen", kind("server"))
	if server.Parent != caller {
		t.Errorf("listen's server span: parent %s, want %s", server.Parent, caller)
	}
	wantAttrs(t, server, map[string]string{"mcp.method.name": "subscriptions/listen", "mcp.protocol.version": "2026-07-28"})
	st.close()
}

func checkMCPLegacy(t *testing.T, o *opsProcess, src spanSource) {
	sid, _ := initialize(t, o.MCP, "2025-11-25")
	legacyPost(t, o.MCP, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	sum := sha256.Sum256([]byte(sid))
	digest := hex.EncodeToString(sum[:8])
	for i, c := range []struct{ method, params, uri string }{
		{"resources/read", `"uri":"a+test://pub/legacy"`, "a+test://pub/legacy"},
		{"resources/subscribe", `"uri":"a+test://pub/2"`, "a+test://pub/2"},
	} {
		tid, caller := randomHex(16), randomHex(8)
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s,"_meta":{"traceparent":"00-%s-%s-01"}}}`, 10+i, c.method, c.params, tid, caller)
		if r := legacyPost(t, o.MCP, sid, body); r.Error != nil {
			t.Fatalf("legacy %s: %s", c.method, r.Body)
		}
		server := src.find(t, tid, c.method, kind("server"))
		if server.Parent != caller {
			t.Errorf("legacy %s: parent %s, want the caller's %s", c.method, server.Parent, caller)
		}
		wantAttrs(t, server, map[string]string{"mcp.method.name": c.method, "mcp.session.id": digest, "mcp.protocol.version": "2025-11-25", "mcp.resource.uri": c.uri})
		for _, v := range server.Attrs {
			if strings.Contains(v, sid) {
				t.Errorf("a span carries the session id itself: %v", server.Attrs)
			}
		}
	}
}

// OTEL_TRACES_EXPORTER=none exports nothing, an OTLP endpoint set or not,
// and prints none: not while serving, not when flushing at shutdown.
func TestTracingExporterNone(t *testing.T) {
	recv := startOTLPHTTP(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", up.URL), "OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.Endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	for i := range 5 {
		if text, _, _ := readAs(t, o.MCP, fmt.Sprintf("a+test://pub/%d", i), ""); text == "" {
			t.Fatal("no text")
		}
	}
	o.stop(t) // a tracer provider would flush its last spans now
	if n := recv.count.Load(); n != 0 {
		t.Errorf("OTEL_TRACES_EXPORTER=none exported %d spans", n)
	}
	if spans := consoleSpans(o.Logs)(); len(spans) != 0 {
		t.Errorf("OTEL_TRACES_EXPORTER=none printed %d spans", len(spans))
	}
	if o.logCount("tracing on") != 0 {
		t.Errorf("tracing said on:\n%s", o.Logs.String())
	}
}

// A collector that is down for a while (its port refuses connections) is
// logged through the structured log once when exports start failing and
// once when they recover, however many batches failed in between; the
// SDK prints nothing of its own.
func TestTraceExportOutageLoggedOnce(t *testing.T) {
	recv := &otlpReceiver{}
	collector := newSwitchable(t, recv.handler())
	recv.Endpoint = strings.TrimSuffix(collector.URL(), "/mcp")
	collector.down()
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", up.URL), "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.Endpoint, "OTEL_BSP_SCHEDULE_DELAY=50")
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	for i := range 30 { // batches of 50 ms, each refused
		readAs(t, o.MCP, fmt.Sprintf("a+test://pub/%d", i), "")
		time.Sleep(60 * time.Millisecond) // spreads the reads over batches: the load itself
	}
	collector.up()
	eventually(t, 15*time.Second, func() error {
		readAs(t, o.MCP, "a+test://pub/after", "")
		if recv.count.Load() == 0 {
			return fmt.Errorf("no span received since the collector came back")
		}
		return nil
	})
	eventually(t, 15*time.Second, func() error {
		if o.logCount("trace export recovered", "failures=") != 1 {
			return fmt.Errorf("no recovery line")
		}
		return nil
	})
	failing, still := o.logCount("level=WARN", "trace export failing"), o.logCount("trace export still failing")
	var sdkLines int
	for _, line := range strings.Split(o.Logs.String(), "\n") {
		if line != "" && !strings.HasPrefix(line, "time=") {
			sdkLines++ // not the structured log's
		}
	}
	if failing != 1 || still > 1 || sdkLines != 0 {
		t.Errorf("a collector outage logged %d failing and %d still-failing lines, and %d lines outside the structured log:\n%s",
			failing, still, sdkLines, o.Logs.String())
	}
}
