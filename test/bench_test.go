package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Benchmarks run a load generator, Manifold and the upstream in one process,
// so every figure is measured side by side with its reference on the same
// machine in the same run. See BENCHMARKS.md for the command and results.

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}

// benchPost sends body to url and fails unless the answer is a result.
func benchPost(b *testing.B, url string, h http.Header, body []byte) {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	req.Header = h
	resp, err := benchClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"result"`)) {
		b.Fatalf("HTTP %d: %s", resp.StatusCode, out)
	}
}

// benchUpstream is a go-sdk server with one 1 KiB text resource whose
// answers carry no cache hints (ttlMs 0), so every read passes through.
func benchUpstream(b *testing.B) *httpUpstream {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	text := strings.Repeat("manifold benchmark payload ", 38)[:1024]
	s.AddResource(&mcp.Resource{URI: "test://bench/doc", Name: "doc", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://bench/doc", MIMEType: "text/plain", Text: text}}}, nil
		})
	return modernSDK(b, s)
}

// BenchmarkPassThroughRead compares resources/read through Manifold with the
// same read sent to the upstream directly: serial (latency per request) and
// parallel (throughput).
func BenchmarkPassThroughRead(b *testing.B) {
	up := benchUpstream(b)
	p := startProxy(b, "log: {level: error}\nupstreams:"+httpUpstreamYAML("bench", up.URL))
	targets := []struct {
		name, url, uri string
	}{
		{"direct", up.URL, "test://bench/doc"},
		{"manifold", p.URL, "bench+test://bench/doc"},
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, tg := range targets {
			body := []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, tg.uri)))
			h := headers("resources/read", tg.uri)
			b.Run(mode+"/"+tg.name, func(b *testing.B) {
				benchPost(b, tg.url, h, body) // warm: negotiation, connections
				b.ReportAllocs()
				b.ResetTimer()
				if mode == "serial" {
					for b.Loop() {
						benchPost(b, tg.url, h, body)
					}
					return
				}
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						benchPost(b, tg.url, h, body)
					}
				})
			})
		}
	}
}
