package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// Benchmarks run a load generator, Manifold and the upstream in one process,
// so every figure is measured side by side with its reference on the same
// machine in the same run. See BENCHMARKS.md for the command and results.

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}

// benchPost sends body to url and fails unless the answer is a result.
func benchPost(b *testing.B, url string, h http.Header, body []byte) {
	benchPostRaw(b, url, h, body)
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
	// The cache off: otherwise concurrent identical reads would be
	// collapsed into one upstream call, and this would not measure the hop.
	p := startProxy(b, "cache: {memory: {max_bytes: 0}}\nupstreams:"+httpUpstreamYAML("bench", up.URL))
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

// hintedUpstream serves test://... reads with a 10-minute public ttl, so a
// warm Manifold answers from its cache; a template makes every URI valid.
func hintedUpstream(b testing.TB) (*httpUpstream, *atomic.Int64) {
	var calls atomic.Int64
	text := strings.Repeat("manifold benchmark payload ", 38)[:1024]
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
			c.TTLMs, c.CacheScope = 600_000, "public"
			if r, ok := req.(*mcp.ReadResourceRequest); ok && strings.HasPrefix(r.Params.URI, "test://priv/") {
				c.CacheScope = "private"
			}
		},
	})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://{+path}", Name: "any"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			calls.Add(1)
			if req.Params.URI == "test://slow" {
				time.Sleep(100 * time.Millisecond)
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: text}}}, nil
		})
	return modernSDK(b, s), &calls
}

// bareServer answers every POST with body, after reading the request: the
// least any HTTP JSON-RPC server can do, the reference for a cache hit.
func bareServer(b *testing.B, body []byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

func parallel(b *testing.B, url string, h http.Header, body []byte) {
	benchPost(b, url, h, body)
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchPost(b, url, h, body)
		}
	})
}

// BenchmarkCachedRead compares a memory-tier hit through Manifold with a
// bare net/http handler answering the same bytes, and measures a Redis hit
// with the memory tier off.
func BenchmarkCachedRead(b *testing.B) {
	up, _ := hintedUpstream(b)
	uri := "h+test://doc"
	h := headers("resources/read", uri)
	body := []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	memory := startProxy(b, "upstreams:"+httpUpstreamYAML("h", up.URL))
	// The bare handler answers exactly what Manifold answers for this read.
	resp, err := benchClient.Do(func() *http.Request {
		r, _ := http.NewRequest(http.MethodPost, memory.URL, bytes.NewReader(body))
		r.Header = h
		return r
	}())
	if err != nil {
		b.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bare := bareServer(b, answer)

	b.Run("bare-net-http", func(b *testing.B) { parallel(b, bare, h, body) })
	b.Run("manifold-memory-hit", func(b *testing.B) { parallel(b, memory.URL, h, body) })

	rs := redistest.Start(b)
	redisOnly := startProxy(b, fmt.Sprintf("cache: {memory: {max_bytes: 0}, secret: bench-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL())+httpUpstreamYAML("h", up.URL))
	benchPost(b, redisOnly.URL, h, body)
	redisEntries(b, rs, "public", 1)
	b.Run("manifold-redis-hit", func(b *testing.B) { parallel(b, redisOnly.URL, h, body) })
}

// BenchmarkSealedRedisHit is a Redis hit of a 1 KiB private entry, always
// sealed there (memory tier off, so every read is a Redis hit that opens
// the seal).
func BenchmarkSealedRedisHit(b *testing.B) {
	up, _ := hintedUpstream(b)
	uri := "h+test://priv/doc"
	h := headers("resources/read", uri)
	h.Set("Authorization", "Bearer bench-token")
	body := []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	rs := redistest.Start(b)
	p := startProxy(b, fmt.Sprintf("cache: {memory: {max_bytes: 0}, secret: bench-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL())+
		httpUpstreamYAML("h", up.URL, "forward_headers: [Authorization]"))
	benchPost(b, p.URL, h, body)
	redisEntries(b, rs, "private", 1)
	b.Run("sealed", func(b *testing.B) { parallel(b, p.URL, h, body) })
}

// BenchmarkMiss measures a cacheable read that misses every tier (a new URI
// each time) through Manifold, against the same reads sent to the upstream
// directly: the cost of looking up, filling and storing on top of the hop.
func BenchmarkMiss(b *testing.B) {
	up, _ := hintedUpstream(b)
	p := startProxy(b, "upstreams:"+httpUpstreamYAML("h", up.URL))
	var n atomic.Int64
	for _, tg := range []struct{ name, url, prefix string }{{"direct", up.URL, ""}, {"manifold", p.URL, "h+"}} {
		b.Run(tg.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				uri := fmt.Sprintf("%stest://miss/%d", tg.prefix, n.Add(1))
				benchPost(b, tg.url, headers("resources/read", uri), []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))))
			}
		})
	}
}

// BenchmarkColdStampede sends 500 concurrent identical reads of a cold,
// slow resource and reports the upstream calls they cost (goal: 1).
func BenchmarkColdStampede(b *testing.B) {
	up, calls := hintedUpstream(b)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := startProxy(b, "upstreams:"+httpUpstreamYAML("h", up.URL))
		benchPost(b, p.URL, headers("server/discover", ""), []byte(rpcBody(1, "server/discover", "")))
		before := calls.Load()
		b.StartTimer()
		var wg sync.WaitGroup
		for i := 0; i < 500; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				benchPost(b, p.URL, headers("resources/read", "h+test://slow"), []byte(rpcBody(i, "resources/read", `"uri":"h+test://slow"`)))
			}()
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(calls.Load()-before), "upstream-calls/500-reads")
		p.stop()
		b.StartTimer()
	}
}

// subscribers opens n raw subscriptions/listen streams to url (with body
// built by listenBody(i)), and counts the updates they receive: after each
// event, arrivals delivers the time the last of the n received it.
type subscribers struct {
	n        int
	received atomic.Int64
	target   atomic.Int64
	last     chan time.Time
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

var subClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 0}}

func openSubscribers(b *testing.B, url string, n int, listenBody func(i int) string, h http.Header) *subscribers {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscribers{n: n, last: make(chan time.Time, 1), cancel: cancel}
	acked := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(listenBody(i)))
			req.Header = h
			resp, err := subClient.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					b.Error(err)
				}
				acked <- struct{}{}
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first := true
			for sc.Scan() {
				line := sc.Bytes()
				if !bytes.HasPrefix(line, []byte("data: ")) {
					continue
				}
				if first {
					first = false
					acked <- struct{}{}
					continue
				}
				if bytes.Contains(line, []byte("resources/updated")) {
					if s.received.Add(1) == s.target.Load() {
						s.last <- time.Now()
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		<-acked
	}
	return s
}

func (s *subscribers) close() {
	s.cancel()
	s.wg.Wait()
}

// round fires one upstream event and returns how long until the last
// subscriber had it.
func (s *subscribers) round(fire func()) time.Duration {
	s.target.Add(int64(s.n))
	start := time.Now()
	fire()
	select {
	case end := <-s.last:
		return end.Sub(start)
	case <-time.After(30 * time.Second):
		return -1
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkFanOut measures the time from an upstream's resources/updated to
// its arrival at the 1,000th subscriber: 1,000 subscribers of the go-sdk
// upstream itself (the reference), and 1,000 subscribers of Manifold, which
// holds one subscription upstream. Each iteration is one event.
func BenchmarkFanOut(b *testing.B) {
	const n = 1000
	for _, mode := range []string{"direct", "manifold"} {
		b.Run(mode, func(b *testing.B) {
			s := newSDKServer("fan", sdkOptions{resources: 1})
			up := modernSDK(b, s)
			url, uri := up.URL, "test://fan/0"
			if mode == "manifold" {
				p := startProxy(b, "log: {level: error}\nupstreams:"+httpUpstreamYAML("f", up.URL))
				url, uri = p.URL, "f+test://fan/0"
			}
			body := func(i int) string {
				return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":[%q]},%s}}`, i+1, uri, metaOK)
			}
			subs := openSubscribers(b, url, n, body, headers("subscriptions/listen", ""))
			defer subs.close()
			time.Sleep(200 * time.Millisecond)
			var lat []time.Duration
			b.ResetTimer()
			for b.Loop() {
				d := subs.round(func() { updateUpstream(b, s, "test://fan/0") })
				if d < 0 {
					b.Fatalf("an event did not reach every subscriber: %d of %d received", subs.received.Load(), subs.target.Load())
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkIdleSubscriberMemory measures the memory one idle subscription
// costs the process: 1,000 idle streams to Manifold, against 1,000 idle
// streams to a bare handler that answers with SSE headers and waits (the
// same connections and client, nothing else). Client and server share the
// process, so the difference is Manifold's own cost.
func BenchmarkIdleSubscriberMemory(b *testing.B) {
	const n = 1000
	up := modernSDK(b, newSDKServer("idle", sdkOptions{resources: 1}))
	p := startProxy(b, "log: {level: error}\nupstreams:"+httpUpstreamYAML("i", up.URL))
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: message\ndata: {}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer bare.Close()
	body := func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true,"resourceSubscriptions":["i+test://idle/0"]},%s}}`, i+1, metaOK)
	}
	measure := func(url string) float64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		subs := openSubscribers(b, url, n, body, headers("subscriptions/listen", ""))
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		runtime.ReadMemStats(&after)
		subs.close()
		inUse := func(m runtime.MemStats) float64 { return float64(m.HeapInuse + m.StackInuse) }
		return (inUse(after) - inUse(before)) / n
	}
	// A first round of each warms pools and one-time allocations on both
	// sides; it is not counted.
	measure(bare.URL)
	measure(p.URL)
	for b.Loop() {
		ref := measure(bare.URL)
		got := measure(p.URL)
		b.ReportMetric(ref, "bare-bytes/subscriber")
		b.ReportMetric(got, "manifold-bytes/subscriber")
		b.ReportMetric(got-ref, "manifold-own-bytes/subscriber")
	}
}
