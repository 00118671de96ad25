package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// hintedServer is a go-sdk server whose resources carry chosen cache hints.
// Each read's text names the caller (the Authorization header it received)
// and counts the server's calls for that URI, so a test sees both who an
// answer was made for and whether it was made again:
//
//	test://pub/N    public, 60 s
//	test://priv/N   private, 60 s
//	test://short    public, 1.5 s
//	test://mis/Public cacheScope "Public" (mis-cased), 60 s
//	test://slow     public, 60 s, answers after 300 ms
//	test://priv/slow private, 60 s, answers after 300 ms
//	test://zero     public, ttlMs 0
//	test://big      public, 60 s, a 2 MiB text
//	test://trace    public, 60 s, echoes the request's traceparent in _meta
//
// A caller whose Authorization is "Bearer denied" gets an error.
type hintedServer struct {
	*mcp.Server
	mu    sync.Mutex
	calls map[string]int
}

func newHintedServer() *hintedServer {
	h := &hintedServer{calls: map[string]int{}}
	h.Server = mcp.NewServer(&mcp.Implementation{Name: "hinted", Version: "1"}, &mcp.ServerOptions{
		// Subscriptions are accepted, so a test can watch a URI and have
		// the server announce its changes.
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
		SetCacheable: func(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
			r, ok := req.(*mcp.ReadResourceRequest)
			if !ok {
				c.TTLMs, c.CacheScope = 60_000, "public"
				return
			}
			uri := r.Params.URI
			switch {
			case strings.HasPrefix(uri, "test://priv/hot/"):
				c.TTLMs, c.CacheScope = 2000, "private"
			case strings.HasPrefix(uri, "test://hot/"):
				c.TTLMs, c.CacheScope = 2000, "public"
			case strings.HasPrefix(uri, "test://priv/"):
				c.TTLMs, c.CacheScope = 60_000, "private"
			case uri == "test://short":
				c.TTLMs, c.CacheScope = 1500, "public"
			case uri == "test://mis/Public":
				c.TTLMs, c.CacheScope = 60_000, "Public"
			case uri == "test://zero":
				c.TTLMs, c.CacheScope = 0, "public"
			default:
				c.TTLMs, c.CacheScope = 60_000, "public"
			}
		},
	})
	h.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://{+path}", Name: "any"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			uri := req.Params.URI
			who := principalOf(req.Extra.Header.Get("Authorization"))
			if who == "Bearer denied" {
				return nil, fmt.Errorf("access denied")
			}
			if uri == "test://slow" || uri == "test://priv/slow" {
				select {
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			h.mu.Lock()
			h.calls[uri]++
			n := h.calls[uri]
			h.mu.Unlock()
			text := fmt.Sprintf("for=%s call=%d", who, n)
			res := &mcp.ReadResourceResult{}
			switch uri {
			case "test://big":
				text += strings.Repeat("x", 2<<20)
			case "test://trace":
				res.Meta = mcp.Meta{"traceparent": req.Params.Meta["traceparent"]}
			}
			res.Contents = []*mcp.ResourceContents{{URI: uri, Text: text}}
			return res, nil
		})
	return h
}

// principalOf is how the hinted server tells callers apart: a bearer JWT
// by its subject ("Bearer " + sub, as an upstream that answers per user
// would, whatever token the user holds now), anything else as sent.
func principalOf(authorization string) string {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	parts := strings.Split(tok, ".")
	if !ok || len(parts) != 3 {
		return authorization
	}
	body, err := decodeSegment(parts[1])
	var c struct {
		Sub string `json:"sub"`
	}
	if err != nil || json.Unmarshal(body, &c) != nil || c.Sub == "" {
		return authorization
	}
	return "Bearer " + c.Sub
}

func (h *hintedServer) count(uri string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[uri]
}

// readAs reads uri through the proxy with a bearer token ("" for none) and
// returns the text and the ttlMs and cacheScope of the answer.
func readAs(t testing.TB, url, uri, token string) (text string, ttl int64, scope string) {
	t.Helper()
	h := headers("resources/read", uri)
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	var rr readResult
	post(t, url, h, rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))).result(t, &rr)
	if rr.TTLms == nil {
		t.Fatalf("read %s: no ttlMs", uri)
	}
	return rr.Contents[0].Text, *rr.TTLms, rr.CacheScope
}

// hintedProxy is a hintedServer behind a Manifold started with extra
// configuration (which ends in a newline).
func hintedProxy(t testing.TB, extra string) (*hintedServer, *httpUpstream, *proxy) {
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	return h, up, cachedProxy(t, up.URL, extra)
}

func cachedProxy(t testing.TB, upURL string, extra string) *proxy {
	return startProxy(t, extra+"upstreams:"+httpUpstreamYAML("h", upURL, "forward_headers: [Authorization]"))
}

// The counts a user of a cache notices: a second read within ttl costs no
// upstream call, a read after expiry costs one, concurrent cold reads cost
// one, and the ttlMs handed out counts down and is never negative.
func TestCacheUpstreamCalls(t *testing.T) {
	// Refresh ahead off: a read in an entry's last quarter would refill it
	// in the background (its own tests, in refresh_test.go), racing the
	// counts asserted here.
	h, _, p := hintedProxy(t, "cache: {refresh_ahead: off}\n")

	first, ttl1, scope := readAs(t, p.URL, "h+test://pub/1", "")
	second, ttl2, _ := readAs(t, p.URL, "h+test://pub/1", "")
	if h.count("test://pub/1") != 1 || first != second {
		t.Errorf("second read within ttl: %d upstream calls, answers %q / %q", h.count("test://pub/1"), first, second)
	}
	if scope != "public" || ttl1 > 60_000 || ttl2 > ttl1 {
		t.Errorf("hints: scope %q, ttl %d then %d", scope, ttl1, ttl2)
	}

	// Expiry: a 1.5 s entry counts down, then costs one more call. The
	// process counts it by its own clock: the waits are real time.
	var last int64 = 1500
	readAs(t, p.URL, "h+test://short", "")
	for i := 0; i < 4; i++ {
		time.Sleep(300 * time.Millisecond)
		_, ttl, _ := readAs(t, p.URL, "h+test://short", "")
		if ttl < 0 || ttl > last || ttl > 1500-300*int64(i+1)+50 {
			t.Errorf("ttlMs %d after %d ms (previous %d)", ttl, 300*(i+1), last)
		}
		last = ttl
	}
	if h.count("test://short") != 1 {
		t.Fatalf("reads within the ttl reached the upstream %d times", h.count("test://short"))
	}
	time.Sleep(400 * time.Millisecond)
	text, ttl, _ := readAs(t, p.URL, "h+test://short", "")
	if h.count("test://short") != 2 || !strings.Contains(text, "call=2") || ttl < 1000 {
		t.Errorf("read after expiry: %d calls, %q, ttl %d", h.count("test://short"), text, ttl)
	}

	// Concurrent cold reads of a slow resource: one upstream call.
	const n = 100
	var wg sync.WaitGroup
	texts := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			texts[i], _, _ = readAs(t, p.URL, "h+test://slow", "")
		}()
	}
	wg.Wait()
	if c := h.count("test://slow"); c != 1 {
		t.Errorf("%d concurrent cold reads made %d upstream calls", n, c)
	}
	for _, tx := range texts {
		if tx != texts[0] {
			t.Fatalf("collapsed readers got different answers: %q vs %q", tx, texts[0])
		}
	}

	// ttlMs 0 is never stored.
	readAs(t, p.URL, "h+test://zero", "")
	readAs(t, p.URL, "h+test://zero", "")
	if h.count("test://zero") != 2 {
		t.Errorf("a ttlMs 0 answer was cached (%d calls)", h.count("test://zero"))
	}
}

// A private entry of token A is never served to token B: B costs a call of
// its own and gets its own answer, and A's entry stays A's.
func TestCachePrivatePerCredential(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	a1, _, scope := readAs(t, p.URL, "h+test://priv/1", "token-A")
	b1, _, _ := readAs(t, p.URL, "h+test://priv/1", "token-B")
	a2, _, _ := readAs(t, p.URL, "h+test://priv/1", "token-A")
	b2, _, _ := readAs(t, p.URL, "h+test://priv/1", "token-B")
	anon, _, _ := readAs(t, p.URL, "h+test://priv/1", "")
	if scope != "private" || !strings.Contains(a1, "for=Bearer token-A") || !strings.Contains(b1, "for=Bearer token-B") || !strings.Contains(anon, "for= ") {
		t.Errorf("answers: A %q, B %q, anonymous %q (scope %q)", a1, b1, anon, scope)
	}
	if a1 != a2 || b1 != b2 {
		t.Errorf("repeat reads were not cached per credential: %q/%q %q/%q", a1, a2, b1, b2)
	}
	if c := h.count("test://priv/1"); c != 3 {
		t.Errorf("upstream calls %d, want 3 (A, B, anonymous)", c)
	}
	// A public entry is shared across credentials.
	readAs(t, p.URL, "h+test://pub/2", "token-A")
	readAs(t, p.URL, "h+test://pub/2", "token-B")
	if c := h.count("test://pub/2"); c != 1 {
		t.Errorf("a public entry cost %d calls for two credentials", c)
	}
}

// Stale-if-error: when the upstream dies after an entry went stale, the
// stale entry is served with ttlMs 0 for stale_if_error, then no longer.
func TestCacheStaleIfError(t *testing.T) {
	_, up, p := hintedProxy(t, "cache: {stale_if_error: 2s}\n")
	fresh, _, _ := readAs(t, p.URL, "h+test://short", "")
	filled := time.Now()
	time.Sleep(1600 * time.Millisecond) // past the 1.5 s freshness
	up.srv.CloseClientConnections()
	up.srv.Close()
	text, ttl, _ := readAs(t, p.URL, "h+test://short", "")
	if text != fresh || ttl != 0 {
		t.Errorf("with the upstream down: %q ttl %d, want the stale %q with ttlMs 0", text, ttl, fresh)
	}
	if m := scrape(t, p.URL); counted(t, m, "manifold_cache_stale_served_total", "upstream", "h") != 1 {
		t.Errorf("stale serving not counted:\n%s", grepLines(m, "stale"))
	}
	// Past freshness and stale_if_error together, by the real clock the
	// process counts them with.
	time.Sleep(time.Until(filled.Add(1500*time.Millisecond + 2*time.Second + 200*time.Millisecond)))
	r := post(t, p.URL, headers("resources/read", "h+test://short"), rpcBody(1, "resources/read", `"uri":"h+test://short"`))
	r.wantError(t, http.StatusOK, -32603)
}

// scrape fetches /metrics from the proxy whose endpoint is url.
func scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(url, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Two replicas sharing one Redis: what one fetched, the other serves without
// an upstream call, with the remaining time by Redis's clock.
func TestCacheTwoReplicasShareRedis(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	shared := fmt.Sprintf("cache: {secret: shared-secret-0123456789, redis: {url: %q}}\n", rs.URL())
	a := cachedProxy(t, up.URL, shared)
	b := cachedProxy(t, up.URL, shared)
	textA, _, _ := readAs(t, a.URL, "h+test://pub/9", "")
	privA, _, _ := readAs(t, a.URL, "h+test://priv/9", "token-A")
	// a writes to Redis after answering. A third replica's reads return
	// once the entries are there (it finds them, or waits on a's fill
	// lease, which a holds until they are stored): b's are Redis hits.
	c := cachedProxy(t, up.URL, shared)
	textC, _, _ := readAs(t, c.URL, "h+test://pub/9", "")
	privC, _, _ := readAs(t, c.URL, "h+test://priv/9", "token-A")
	if textC != textA || privC != privA || h.count("test://pub/9") != 1 || h.count("test://priv/9") != 1 {
		t.Fatalf("replica c did not get replica a's entries: %q/%q %q/%q", textA, textC, privA, privC)
	}
	textB, ttlB, _ := readAs(t, b.URL, "h+test://pub/9", "")
	privB, _, _ := readAs(t, b.URL, "h+test://priv/9", "token-A")
	if textA != textB || privA != privB || h.count("test://pub/9") != 1 || h.count("test://priv/9") != 1 {
		t.Errorf("replica b did not use replica a's entries: %q/%q %q/%q, calls %d %d", textA, textB, privA, privB, h.count("test://pub/9"), h.count("test://priv/9"))
	}
	if ttlB >= 60_000 || ttlB < 55_000 {
		t.Errorf("remaining ttl on replica b: %d", ttlB)
	}
	// Token B on replica b: its own call.
	if privB2, _, _ := readAs(t, b.URL, "h+test://priv/9", "token-B"); !strings.Contains(privB2, "token-B") {
		t.Errorf("token B on replica b got %q", privB2)
	}
	m := scrape(t, b.URL)
	if n := counted(t, m, "manifold_cache_hits_total", "tier", "redis", "upstream", "h"); n != 2 {
		t.Errorf("%v redis hits counted on replica b, want 2:\n%s", n, grepLines(m, "cache_hits"))
	}
	// The shutdown summary.
	b.stop()
	if !strings.Contains(b.Logs.String(), "cache summary: memory_hits=") {
		t.Errorf("no cache summary at shutdown")
	}
}

// Upstream calls made for concurrent identical cold reads, for any number of
// readers sharing a credential.
func TestCacheCollapsesManyReaders(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := post(t, p.URL, headers("resources/read", "h+test://slow"), rpcBody(i, "resources/read", `"uri":"h+test://slow"`))
			if r.Error != nil || fmt.Sprint(i) != string(r.ID) {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 || h.count("test://slow") != 1 {
		t.Errorf("500 concurrent cold reads: %d failed, %d upstream calls", failed.Load(), h.count("test://slow"))
	}
}
