package test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkRefreshAhead reads one hot key whose entries live 200 ms, from
// an upstream that takes 5 ms to answer, with refresh ahead on (the
// default) and off, side by side: over -benchtime 4s that is about 20
// expiries. It reports the p50 and p99 of a read; with refresh ahead the
// p99 stays a hit's, without it every expiry makes its readers wait for
// the upstream.
func BenchmarkRefreshAhead(b *testing.B) {
	s := mcp.NewServer(&mcp.Implementation{Name: "hot", Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 200, "public" },
	})
	s.AddResource(&mcp.Resource{URI: "test://hot", Name: "hot"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		time.Sleep(5 * time.Millisecond)
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://hot", Text: "hot"}}}, nil
	})
	up := modernSDK(b, s)
	h := headers("resources/read", "h+test://hot")
	body := []byte(rpcBody(1, "resources/read", `"uri":"h+test://hot"`))
	for _, mode := range []string{"public", "off"} {
		p := startProxy(b, "cache: {refresh_ahead: "+mode+"}\nupstreams:"+httpUpstreamYAML("h", up.URL))
		b.Run("refresh-"+mode, func(b *testing.B) {
			benchPost(b, p.URL, h, body)
			var mu sync.Mutex
			var all []time.Duration
			b.ResetTimer()
			b.SetParallelism(2) // 4 readers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					t0 := time.Now()
					benchPost(b, p.URL, h, body)
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		})
	}
}
