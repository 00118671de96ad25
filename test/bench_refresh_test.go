package test

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkRefreshAhead reads one hot key whose entries live 200 ms, from
// an upstream that takes 5 ms to answer, with refresh ahead on (the
// default) and off, side by side: over -benchtime 4s that is about 20
// expiries. It reports percentiles of a read and how many reads took 5 ms
// or more (as long as the upstream: those that waited for a fill). Without
// refresh ahead every expiry makes the readers of that moment wait.
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
			waited := len(all) - sort.Search(len(all), func(i int) bool { return all[i] >= 5*time.Millisecond })
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(all[len(all)*999/1000].Microseconds()), "p99.9-µs")
			b.ReportMetric(float64(waited), "reads≥5ms")
		})
	}
}
