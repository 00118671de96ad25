package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCachedToolCall compares, side by side, one read-only tool call
// (a go-sdk server, stateless, JSON answers, a tool annotated readOnlyHint
// that answers 1 KiB) sent to the upstream directly, through Manifold
// without a tool cache (every call reaches the upstream), and through
// Manifold with upstreams[].tool_cache (after the first call, a memory-tier
// hit): serial (latency) and 16 concurrent callers (throughput).
func BenchmarkCachedToolCall(b *testing.B) {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	text := strings.Repeat("manifold benchmark payload ", 38)[:1024]
	s.AddTool(&mcp.Tool{Name: "lookup", InputSchema: objectSchema(`{"id":{"type":"string"}}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a struct{ ID string }
			_ = json.Unmarshal(req.Params.Arguments, &a)
			return textResult(a.ID + " " + text), nil
		})
	up := modernSDK(b, s)
	p := startProxy(b, "upstreams:"+httpUpstreamYAML("plain", up.URL)+httpUpstreamYAML("cached", up.URL, "tool_cache: {ttl: 10m, scope: public}"))
	targets := []struct{ name, url, tool string }{
		{"direct", up.URL, "lookup"},
		{"manifold-uncached", p.URL, "plain_lookup"},
		{"manifold-cached", p.URL, "cached_lookup"},
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, tg := range targets {
			body := []byte(rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":{"id":"ticket-42"}`, tg.tool)))
			h := headers("tools/call", tg.tool)
			b.Run(mode+"/"+tg.name, func(b *testing.B) {
				benchPost(b, tg.url, h, body) // warm: negotiation, connections, the entry
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
