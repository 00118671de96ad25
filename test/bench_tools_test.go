package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// BenchmarkToolCall compares a tools/call through Manifold with the same
// call sent to the upstream directly (a go-sdk server, stateless, JSON
// answers, a tool that echoes 1 KiB): serial (latency) and 16 concurrent
// callers (throughput). Calls are never cached, so this is the hop itself.
func BenchmarkToolCall(b *testing.B) {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	text := strings.Repeat("manifold benchmark payload ", 38)[:1024]
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: objectSchema(`{"text":{"type":"string"}}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a struct{ Text string }
		_ = json.Unmarshal(req.Params.Arguments, &a)
		return textResult(a.Text), nil
	})
	up := modernSDK(b, s)
	p := startProxy(b, "upstreams:"+httpUpstreamYAML("bench", up.URL))
	for _, mode := range []string{"serial", "parallel"} {
		for _, tg := range []struct{ name, url, tool string }{{"direct", up.URL, "echo"}, {"manifold", p.URL, "bench_echo"}} {
			body := []byte(rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":{"text":%q}`, tg.tool, text)))
			h := headers("tools/call", tg.tool)
			b.Run(mode+"/"+tg.name, func(b *testing.B) {
				benchPost(b, tg.url, h, body)
				b.ReportAllocs()
				b.ResetTimer()
				if mode == "serial" {
					for b.Loop() {
						benchPost(b, tg.url, h, body)
					}
					return
				}
				b.SetParallelism(8) // 16 callers on 2 cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						benchPost(b, tg.url, h, body)
					}
				})
			})
		}
	}
}

// BenchmarkToolsListFanOut compares a merged tools/list over 16 upstreams
// (each a go-sdk server with 20 tools that takes 2 ms + i×0.5 ms to answer,
// so the slowest takes 9.5 ms) with tools/list sent to the slowest one
// alone. The cache is off: every page is fetched.
func BenchmarkToolsListFanOut(b *testing.B) {
	benchListFanOut(b, "tools/list", func(i int, s *mcp.Server) {
		for j := 0; j < 20; j++ {
			s.AddTool(&mcp.Tool{Name: fmt.Sprint("tool", j), Description: "a tool of the benchmark", InputSchema: objectSchema(`{"q":{"type":"string"}}`)},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("x"), nil })
		}
	})
}

// BenchmarkResourcesListFanOut is BenchmarkToolsListFanOut for a merged
// resources/list (20 resources per upstream, each URI namespaced), the list
// scripts/peers -scale -fanout measures across processes.
func BenchmarkResourcesListFanOut(b *testing.B) {
	benchListFanOut(b, "resources/list", func(i int, s *mcp.Server) {
		for j := 0; j < 20; j++ {
			uri := fmt.Sprintf("test://u%d/doc/%d", i, j)
			s.AddResource(&mcp.Resource{URI: uri, Name: fmt.Sprint("doc", j), MIMEType: "text/plain"},
				func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
					return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "x"}}}, nil
				})
		}
	})
}

// benchListFanOut lists list through Manifold over 16 go-sdk upstreams
// that fill adds to, the i-th answering after 2 ms + i×0.5 ms, against the
// slowest alone; the cache is off, so every page is fetched.
func benchListFanOut(b *testing.B, list string, fill func(i int, s *mcp.Server)) {
	const n = 16
	yaml := "cache: {memory: {max_bytes: 0}}\nupstreams:"
	var slowest *httpUpstream
	for i := 0; i < n; i++ {
		s := mcp.NewServer(&mcp.Implementation{Name: fmt.Sprint("u", i), Version: "1"}, nil)
		fill(i, s)
		delay := 2*time.Millisecond + time.Duration(i)*500*time.Microsecond
		inner := modernHandler(s)
		up := serveHTTP(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(delay)
			inner.ServeHTTP(w, r)
		}))
		yaml += httpUpstreamYAML(fmt.Sprint("u", i), up.URL)
		slowest = up
	}
	p := startProxy(b, yaml)
	body := []byte(rpcBody(1, list, ""))
	h := headers(list, "")
	for _, tg := range []struct{ name, url string }{{"slowest-alone", slowest.URL}, {"manifold-16", p.URL}} {
		b.Run(tg.name, func(b *testing.B) {
			benchPost(b, tg.url, h, body)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				benchPost(b, tg.url, h, body)
			}
		})
	}
}

// BenchmarkLegacyRead compares a legacy caller's read through Manifold with
// the same read by a modern caller: both memory-tier hits, so the difference
// is the session lookup and the translation to the legacy wire. Sessions in
// process, then in Redis (the memory tier of the cache stays on).
func BenchmarkLegacyRead(b *testing.B) {
	up, _ := hintedUpstream(b)
	uri := "h+test://doc"
	modernBody := []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	legacyBody := []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":%q}}`, uri))
	rs := redistest.Start(b)
	for _, c := range []struct{ name, yaml string }{
		{"sessions-in-memory", ""},
		{"sessions-in-redis", fmt.Sprintf("cache: {secret: bench-secret-0123456789, redis: {url: %q}}\n", rs.URL())},
	} {
		p := startProxy(b, c.yaml+"upstreams:"+httpUpstreamYAML("h", up.URL))
		init := post(b, p.URL, http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}},
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
		lh := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
			"Mcp-Session-Id": {init.Header.Get("Mcp-Session-Id")}, "Mcp-Protocol-Version": {"2025-11-25"}}
		b.Run(c.name+"/modern", func(b *testing.B) { parallel(b, p.URL, headers("resources/read", uri), modernBody) })
		b.Run(c.name+"/legacy", func(b *testing.B) { parallel(b, p.URL, lh, legacyBody) })
	}
}
