package test

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkTracing measures what tracing costs, side by side: three
// Manifold processes in front of the same upstream, one without tracing,
// one exporting every span over OTLP/HTTP (to a receiver in this process
// that counts them), and one sampling 1% of traces. Each serves a memory
// hit (16 concurrent clients) and a miss (one at a time, a new URI each, so
// both tiers miss and the fill and store run).
func BenchmarkTracing(b *testing.B) {
	up, _ := hintedUpstream(b)
	recv := startOTLPHTTP(b)
	recv.countOnly = true
	variants := []struct {
		name string
		env  []string
	}{
		{"off", nil},
		{"on", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.Endpoint}},
		{"on-1pct", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.Endpoint,
			"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.01"}},
	}
	urls := make([]string, len(variants))
	for i, v := range variants {
		urls[i] = startOps(b, "upstreams:"+httpUpstreamYAML("h", up.URL), v.env...).MCP
	}
	uri := "h+test://doc"
	hit := []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	for i, v := range variants {
		b.Run("memory-hit/"+v.name, func(b *testing.B) { parallel(b, urls[i], headers("resources/read", uri), hit) })
	}
	var n atomic.Int64
	for i, v := range variants {
		b.Run("miss/"+v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				uri := fmt.Sprintf("h+test://miss/%d", n.Add(1))
				benchPost(b, urls[i], headers("resources/read", uri), []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))))
			}
		})
	}
	eventually(b, 10e9, func() error { // the batch exporter sends within 5 s
		if recv.count.Load() == 0 {
			return fmt.Errorf("no span reached the receiver: tracing was not on")
		}
		return nil
	})
}
