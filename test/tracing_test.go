package test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP trace receiver, over HTTP (protobuf) or gRPC,
// decoding what an exporter really sends with the protocol's own types.
type otlpReceiver struct {
	Endpoint  string // what OTEL_EXPORTER_OTLP_ENDPOINT names
	mu        sync.Mutex
	spans     []*tracepb.Span
	countOnly bool         // a benchmark's receiver keeps no spans, only their number
	count     atomic.Int64 // spans received
	coltracepb.UnimplementedTraceServiceServer
}

func (r *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.count.Add(int64(len(ss.GetSpans())))
			if !r.countOnly {
				r.spans = append(r.spans, ss.GetSpans()...)
			}
		}
	}
}

// Export is the gRPC service.
func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func startOTLPHTTP(t testing.TB) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(r.handler())
	t.Cleanup(srv.Close)
	r.Endpoint = srv.URL
	return r
}

// handler is the receiver's OTLP/HTTP endpoint.
func (r *otlpReceiver) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf export", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
}

func startOTLPGRPC(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, r)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	r.Endpoint = "http://" + l.Addr().String()
	return r
}

// find waits for a span named name in trace traceID matching keep.
func (r *otlpReceiver) find(t *testing.T, traceID []byte, name string, keep func(*tracepb.Span) bool) *tracepb.Span {
	t.Helper()
	var found *tracepb.Span
	eventually(t, 15*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.spans {
			if bytes.Equal(s.GetTraceId(), traceID) && s.GetName() == name && (keep == nil || keep(s)) {
				found = s
				return nil
			}
		}
		return fmt.Errorf("no span %q in trace %x among %d", name, traceID, len(r.spans))
	})
	return found
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// traceHeaders records the traceparent header of each upstream request.
type traceHeaders struct {
	mu   sync.Mutex
	seen []string
}

func (th *traceHeaders) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "resources/read" {
			th.mu.Lock()
			th.seen = append(th.seen, r.Header.Get("traceparent"))
			th.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func (th *traceHeaders) last() string {
	th.mu.Lock()
	defer th.mu.Unlock()
	if len(th.seen) == 0 {
		return ""
	}
	return th.seen[len(th.seen)-1]
}

// With the standard OTEL_* variables pointing at a real OTLP receiver,
// over http/protobuf and over grpc: a read is a server span whose parent
// is the caller's trace context (from its headers, or from `_meta`, which
// wins), with a cache-lookup child and, under it, the upstream call; the
// upstream receives that call's context in its HTTP header and in `_meta`;
// a list fans out into one child span per upstream.
func TestTracingOTLP(t *testing.T) {
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(proto, "/", "-"), func(t *testing.T) {
			recv := startOTLPHTTP(t)
			if proto == "grpc" {
				recv = startOTLPGRPC(t)
			}
			h := newHintedServer()
			th := &traceHeaders{}
			a := serveHTTP(t, th.wrap(modernHandler(h.Server)))
			b := modernSDK(t, newHintedServer().Server)
			o := startOps(t, "upstreams:"+httpUpstreamYAML("a", a.URL)+httpUpstreamYAML("b", b.URL),
				"OTEL_EXPORTER_OTLP_ENDPOINT="+recv.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL="+proto,
				"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=manifold-test")
			o.waitReady(t, http.StatusOK, map[string]string{"a": "ready", "b": "ready"})
			checkReadTrace(t, o, recv, th)
			checkListTrace(t, o, recv)
		})
	}
}

func checkReadTrace(t *testing.T, o *opsProcess, recv *otlpReceiver, th *traceHeaders) {
	traceID, callerSpan := randomHex(16), randomHex(8)
	hdr := headers("resources/read", "a+test://trace")
	hdr.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	// _meta's context wins over the header's.
	metaTrace, metaSpan := randomHex(16), randomHex(8)
	body := strings.Replace(rpcBody(1, "resources/read", `"uri":"a+test://trace"`), `"_meta":{`,
		`"_meta":{"traceparent":"00-`+metaTrace+`-`+metaSpan+`-01",`, 1)
	if r := post(t, o.MCP, hdr, body); r.Error != nil {
		t.Fatalf("read: %s", r.Body)
	}
	tid, _ := hex.DecodeString(metaTrace)
	server := recv.find(t, tid, "resources/read", func(s *tracepb.Span) bool { return s.GetKind() == tracepb.Span_SPAN_KIND_SERVER })
	if hex.EncodeToString(server.GetParentSpanId()) != metaSpan || attr(server, "mcp.method.name") != "resources/read" {
		t.Errorf("server span: parent %x (want the caller's %s), attrs %v", server.GetParentSpanId(), metaSpan, server.GetAttributes())
	}
	lookup := recv.find(t, tid, "cache.lookup", nil)
	if !bytes.Equal(lookup.GetParentSpanId(), server.GetSpanId()) || attr(lookup, "manifold.cache.tier") != "upstream" {
		t.Errorf("cache.lookup: parent %x, want %x; attrs %v", lookup.GetParentSpanId(), server.GetSpanId(), lookup.GetAttributes())
	}
	call := recv.find(t, tid, "resources/read", func(s *tracepb.Span) bool { return s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT })
	if !bytes.Equal(call.GetParentSpanId(), lookup.GetSpanId()) || attr(call, "manifold.upstream") != "a" || attr(call, "mcp.protocol.version") != "2026-07-28" {
		t.Errorf("upstream call span: parent %x, want %x; attrs %v", call.GetParentSpanId(), lookup.GetSpanId(), call.GetAttributes())
	}
	want := "00-" + metaTrace + "-" + hex.EncodeToString(call.GetSpanId()) + "-01"
	if got := th.last(); got != want {
		t.Errorf("upstream HTTP traceparent %q, want %q (the call span's)", got, want)
	}
	if text, _, _ := readAs(t, o.MCP, "a+test://trace", ""); text == "" {
		t.Error("no text")
	}
}

func checkListTrace(t *testing.T, o *opsProcess, recv *otlpReceiver) {
	traceID, callerSpan := randomHex(16), randomHex(8)
	hdr := headers("resources/list", "")
	hdr.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	if r := post(t, o.MCP, hdr, rpcBody(2, "resources/list", "")); r.Error != nil {
		t.Fatalf("list: %s", r.Body)
	}
	tid, _ := hex.DecodeString(traceID)
	server := recv.find(t, tid, "resources/list", func(s *tracepb.Span) bool { return s.GetKind() == tracepb.Span_SPAN_KIND_SERVER })
	if hex.EncodeToString(server.GetParentSpanId()) != callerSpan {
		t.Errorf("list server span parent %x, want the header's %s", server.GetParentSpanId(), callerSpan)
	}
	for _, name := range []string{"a", "b"} {
		page := recv.find(t, tid, "merge.page", func(s *tracepb.Span) bool { return attr(s, "manifold.upstream") == name })
		if !bytes.Equal(page.GetParentSpanId(), server.GetSpanId()) {
			t.Errorf("merge.page of %s: parent %x, want the list's %x", name, page.GetParentSpanId(), server.GetSpanId())
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// With tracing off, a caller's trace context still reaches the upstream,
// unchanged: in `_meta` as it came, and in the traceparent header.
func TestTraceContextPassesThroughWithoutTracing(t *testing.T) {
	h := newHintedServer()
	th := &traceHeaders{}
	a := serveHTTP(t, th.wrap(modernHandler(h.Server)))
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", a.URL))
	tp := "00-" + randomHex(16) + "-" + randomHex(8) + "-01"
	body := strings.Replace(rpcBody(1, "resources/read", `"uri":"a+test://trace"`), `"_meta":{`, `"_meta":{"traceparent":"`+tp+`",`, 1)
	r := post(t, o.MCP, headers("resources/read", "a+test://trace"), body)
	var res struct {
		Meta map[string]any `json:"_meta"`
	}
	r.result(t, &res)
	if res.Meta["traceparent"] != tp || th.last() != tp {
		t.Errorf("upstream got traceparent %v in _meta and %q in its header, want %s in both", res.Meta["traceparent"], th.last(), tp)
	}
	// In the HTTP header alone, as a plain HTTP client sends it.
	tp = "00-" + randomHex(16) + "-" + randomHex(8) + "-01"
	hdr := headers("resources/read", "a+test://trace/header")
	hdr.Set("traceparent", tp)
	var read any
	post(t, o.MCP, hdr, rpcBody(2, "resources/read", `"uri":"a+test://trace/header"`)).result(t, &read)
	if th.last() != tp {
		t.Errorf("upstream got traceparent %q in its header, want the caller's header %s", th.last(), tp)
	}
}
