package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// Three replicas sharing Redis, 500 concurrent cold reads of one slow
// resource spread over them: one upstream call in all. A private resource
// read the same way by three credentials: each gets its own answer, and
// never another's.
func TestOneFillAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	// Redis's timeout is raised from 100 ms: under the race detector and
	// 500 requests, a slower answer would (rightly) make a replica fill
	// by itself, which is not what this test is about.
	shared := fmt.Sprintf("cache: {secret: lease-secret-0123456789, redis: {url: %q, timeout: 2s}}\n", rs.URL())
	replicas := []*proxy{cachedProxy(t, up.URL, shared), cachedProxy(t, up.URL, shared), cachedProxy(t, up.URL, shared)}
	for _, p := range replicas { // each replica has met the upstream
		readAs(t, p.URL, "h+test://warm", "")
	}

	texts := readConcurrently(t, replicas, 500, "h+test://slow", func(int) string { return "" })
	if n := h.count("test://slow"); n != 1 {
		t.Errorf("500 cold reads over 3 replicas cost %d upstream calls, want 1", n)
	}
	if len(texts) != 1 {
		t.Errorf("readers got %d different answers: %v", len(texts), texts)
	}
	// A replica whose reads all came after the entry was stored served
	// them as Redis hits; at least one waited for the holder's fill.
	waited := 0.0
	for _, p := range replicas {
		waited += counted(t, scrape(t, p.URL), "manifold_cache_shared_fills_total", "upstream", "h")
	}
	if waited < 1 {
		t.Errorf("no replica counted a shared fill")
	}

	tokens := []string{"tok-x", "tok-y", "tok-z"}
	byToken := readConcurrently(t, replicas, 300, "h+test://priv/slow", func(i int) string { return tokens[i%3] })
	for text := range byToken {
		owner := ""
		for _, tok := range tokens {
			if strings.Contains(text, "Bearer "+tok) {
				owner = tok
			}
		}
		if owner == "" {
			t.Errorf("a private answer names no reader's token: %q", text)
		}
	}
	if n := h.count("test://priv/slow"); n < 3 || n > 7 {
		t.Errorf("private reads by 3 credentials over 3 replicas cost %d calls, want 3 to 7", n)
	}
}

// readConcurrently reads uri n times at once, request i on replica i%3
// with token(i), checks each private answer is the reader's own, and
// returns the distinct answers.
func readConcurrently(t *testing.T, replicas []*proxy, n int, uri string, token func(int) string) map[string]bool {
	var mu sync.Mutex
	texts := map[string]bool{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			text, _, _ := readAs(t, replicas[i%len(replicas)].URL, uri, token(i))
			if tok := token(i); tok != "" && !strings.Contains(text, "Bearer "+tok) {
				t.Errorf("reader with %s got %q", tok, text)
			}
			mu.Lock()
			texts[text] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	return texts
}

// heldServer serves test://{+path}; each start of a read of test://held is
// counted and signalled. The first is held until release closes (its
// caller is killed mid-fill, however slow the test is to kill it); the
// others take 600 ms.
func heldServer(started chan<- struct{}, starts *atomic.Int32, release <-chan struct{}) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "held", Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 60_000, "public" },
	})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://{+path}", Name: "any"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			if req.Params.URI == "test://held" {
				var filled <-chan time.Time
				if starts.Add(1) > 1 {
					filled = time.After(600 * time.Millisecond)
				}
				select {
				case started <- struct{}{}:
				default:
				}
				select {
				case <-release: // the first fill's end, once its caller is dead
				case <-filled:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "filled"}}}, nil
		})
	return s
}

// The replica holding the fill lease is killed mid-fill: the others, which
// were waiting for it, take the lease over once it expires and answer, with
// one more upstream call, not one each.
func TestFillLeaseHolderKilled(t *testing.T) {
	rs := redistest.Start(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var starts atomic.Int32
	up := modernSDK(t, heldServer(started, &starts, release))
	releaseFill := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseFill) // before the upstream server's close, which waits for the held fill
	shared := fmt.Sprintf("cache: {secret: lease-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL()) + httpUpstreamYAML("h", up.URL)
	holder := startOps(t, shared)
	others := []*proxy{startProxy(t, shared), startProxy(t, shared)}
	for _, p := range others {
		readAs(t, p.URL, "h+test://warm", "")
	}

	holderRead := readInBackground(holder.MCP, "h+test://held")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's fill never reached the upstream")
	}
	before := missesOf(t, others)
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if text, _, _ := readAs(t, others[i%2].URL, "h+test://held", ""); text != "filled" {
				t.Errorf("read %d: %q", i, text)
			}
		})
	}
	// Every read has missed (it is counted before the fill it waits on),
	// and the holder's lease stands: they are waiting on it now.
	eventually(t, 10*time.Second, func() error {
		if n := missesOf(t, others) - before; n < 20 {
			return fmt.Errorf("%v of the 20 reads have missed", n)
		}
		return nil
	})
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	releaseFill()
	wg.Wait()
	<-holderRead
	// A bounded wait: a waiter takes over once the dead holder's 3 s lease
	// expires (and gives up waiting a second later), not after its request
	// times out; about three leases is generous.
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("the waiting replicas answered after %v", took)
	}
	if n := starts.Load(); n != 2 {
		t.Errorf("%d upstream fills started, want 2: the killed holder's and one takeover", n)
	}
}

// missesOf sums the cache misses of upstream h on replicas.
func missesOf(t *testing.T, replicas []*proxy) (n float64) {
	t.Helper()
	for _, p := range replicas {
		n += counted(t, scrape(t, p.URL), "manifold_cache_misses_total", "upstream", "h")
	}
	return n
}

// readInBackground reads uri at url, ignoring the outcome; the channel
// closes when the read has ended.
func readInBackground(url, uri string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))))
		req.Header = headers("resources/read", uri)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	return done
}
