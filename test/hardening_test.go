package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkjsonrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// Findings of the review and the attack (issue #10), one test each.

// A downstream request with id null is not a notification: -32600.
func TestNullIDRequestRefused(t *testing.T) {
	p, _ := legacyFixture(t, "")
	r := post(t, p.URL, headers("resources/list", ""), `{"jsonrpc":"2.0","id":null,"method":"resources/list","params":{`+metaOK+`}}`)
	r.wantError(t, 400, -32600)
}

// An upstream answer with id null answers no request: it is refused, and
// never cached.
func TestNullIDAnswerRefused(t *testing.T) {
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Mcp-Method") == "server/discover" {
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"resources":{}}}}`)
			return
		}
		fmt.Fprint(w, `{"jsonrpc":"2.0","id":null,"result":{"resultType":"complete","ttlMs":60000,"cacheScope":"public","contents":[{"uri":"test://x","text":"forged"}]}}`)
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("u", up.URL+"/mcp"))
	for i := 0; i < 2; i++ {
		r := post(t, p.URL, headers("resources/read", "u+test://x"), rpcBody(1, "resources/read", `"uri":"u+test://x"`))
		if r.Error == nil || strings.Contains(string(r.Body), "forged") {
			t.Fatalf("an answer with id null was served: %s", r.Body)
		}
	}
	if calls.Load() < 3 {
		t.Errorf("the second read did not reach the upstream (%d calls): the null-id answer was cached", calls.Load())
	}
}

// With bearer tokens configured, /metrics needs one too (it names the
// upstreams and their traffic); /healthz stays open. Several Authorization
// headers are refused (400): only the first would be checked, and all
// forwarded.
func TestAccessFindings(t *testing.T) {
	up := modernSDK(t, newSDKServer("a", sdkOptions{resources: 1}))
	tok := "token-0123456789abcdef"
	p := startProxy(t, fmt.Sprintf("auth: {bearer_tokens: [%q], authorization_servers: [\"https://idp.example.com\"]}\nupstreams:", tok)+httpUpstreamYAML("a", up.URL, "forward_headers: [Authorization]"))
	base := strings.TrimSuffix(p.URL, "/mcp")
	get := func(path, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get("/metrics", ""); s != 401 {
		t.Errorf("/metrics without a token: %d, want 401", s)
	}
	if s := get("/metrics", "Bearer "+tok); s != 200 {
		t.Errorf("/metrics with the token: %d", s)
	}
	if s := get("/healthz", ""); s != 200 {
		t.Errorf("/healthz without a token: %d, want 200", s)
	}
	h := headers("resources/list", "")
	h["Authorization"] = []string{"Bearer " + tok, "Bearer someone-else-entirely"}
	post(t, p.URL, h, rpcBody(1, "resources/list", "")).wantError(t, 400, -32600)
}

// A 503 with Retry-After: 60 does not hold a read for a minute: the wait is
// capped (1 s) and never runs past the call's deadline, so a stale entry
// answers promptly.
func TestRetryAfterCapped(t *testing.T) {
	h := newHintedServer()
	var down atomic.Bool
	inner := modernHandler(h.Server)
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() && r.Header.Get("Mcp-Method") == "resources/read" {
			w.Header().Set("Retry-After", "60")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	p := startProxy(t, "cache: {stale_if_error: 1m}\nupstreams:"+httpUpstreamYAML("h", up.URL, "timeout: 5s"))
	fresh, _, _ := readAs(t, p.URL, "h+test://short", "")
	time.Sleep(1600 * time.Millisecond) // past the 1.5 s freshness, by the process's clock
	down.Store(true)
	start := time.Now()
	text, ttl, _ := readAs(t, p.URL, "h+test://short", "")
	// The bound is the behaviour: Retry-After would hold the read for a
	// minute, the 5 s timeout for five seconds; the cap is 1 s.
	if took := time.Since(start); text != fresh || ttl != 0 || took > 3*time.Second {
		t.Errorf("a read against 503 Retry-After: 60 took %v and answered %q (ttl %d), want the stale %q at once", took, text, ttl, fresh)
	}
}

// Cache keys and invalidation tags use the normalized URI: two spellings of
// one resource share an entry, and a change announced for it reaches both.
func TestURISpellingsShareAnEntry(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	st := listen(t, p.URL, 1, `{"resourceSubscriptions":["h+test://doc"]}`)
	st.next(t, 5*time.Second) // acknowledged: the upstream watches test://doc
	first, _, _ := readAs(t, p.URL, "h+test://%64oc", "")
	if same, _, _ := readAs(t, p.URL, "h+test://doc", ""); same != first || h.count("test://doc")+h.count("test://%64oc") != 1 {
		t.Fatalf("two spellings of one URI: %q and %q, %d upstream calls", first, same, h.count("test://doc")+h.count("test://%64oc"))
	}
	updateUpstream(t, h.Server, "test://doc")
	st.expect(t, 1, "notifications/resources/updated", "h+test://doc")
	if after, _, _ := readAs(t, p.URL, "h+test://%64oc", ""); after == first {
		t.Errorf("after the change, the other spelling still answers the old content %q", after)
	}
}

// The upstream is asked with the spelling the cache keys the answer by:
// a read of a/../b is a read of b, asked as b, so an entry never holds an
// answer to a question the upstream was not asked. A fragment and an empty
// port do not take a read out of reach of the resource's invalidation.
func TestURISpellingAskedAsKeyed(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	// test://priv/7 is private: asked as test://PRIV/7, the hinted server
	// would take it for another resource, and answer it as public.
	readAs(t, p.URL, "h+test://PRIV/7", "alice")
	if h.count("test://PRIV/7") != 0 || h.count("test://priv/7") != 1 {
		t.Fatalf("upstream asked %d times as written, %d as keyed", h.count("test://PRIV/7"), h.count("test://priv/7"))
	}
	var rr readResult
	h2 := headers("resources/read", "h+test://priv/7")
	h2.Set("Authorization", "Bearer bob")
	post(t, p.URL, h2, rpcBody(2, "resources/read", `"uri":"h+test://priv/7"`)).result(t, &rr)
	if rr.Contents[0].URI != "h+test://priv/7" || rr.Contents[0].Text != "for=Bearer bob call=2" || rr.CacheScope != "private" {
		t.Errorf("bob's read answered %+v, %s", rr.Contents, rr.CacheScope)
	}

	st := listen(t, p.URL, 1, `{"resourceSubscriptions":["h+test://doc2"]}`)
	st.next(t, 5*time.Second)
	spellings := []string{"h+test://doc2#part", "h+test://doc2:"}
	before := map[string]string{}
	for _, uri := range spellings {
		before[uri], _, _ = readAs(t, p.URL, uri, "")
	}
	updateUpstream(t, h.Server, "test://doc2")
	st.expect(t, 1, "notifications/resources/updated", "h+test://doc2")
	for _, uri := range spellings {
		if after, _, _ := readAs(t, p.URL, uri, ""); after == before[uri] {
			t.Errorf("after the change, %s still answers the old content %q", uri, after)
		}
	}
}

// A watch that drops and comes back ("changes may have been missed") ends
// the freshness of the upstream's entries but keeps them for
// stale-if-error: the next read asks the upstream, and if the upstream is
// then down, the entry answers. Two replicas sharing Redis, both blipping:
// still served stale, from either.
func TestWatchBlipKeepsStaleReserve(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := serveHTTP(t, modernHandler(h.Server))
	shared := fmt.Sprintf("cache: {secret: blip-secret-0123456789, stale_if_error: 1m, redis: {url: %q}}\nupstreams:", rs.URL()) + httpUpstreamYAML("h", up.URL)
	a, b := startProxy(t, shared), startProxy(t, shared)
	fresh, _, _ := readAs(t, a.URL, "h+test://doc", "")
	reserve, _, _ := readAs(t, a.URL, "h+test://reserve", "")
	if again, _, _ := readAs(t, b.URL, "h+test://doc", ""); again != fresh {
		t.Fatalf("replica b: %q", again)
	}
	// The reserve is in Redis: a replica of a moment serves it without an
	// upstream call (b must not hold it in memory: its stale answer below
	// comes from Redis).
	c := startProxy(t, shared)
	if got, _, _ := readAs(t, c.URL, "h+test://reserve", ""); got != reserve || h.count("test://reserve") != 1 {
		t.Fatalf("a third replica read the reserve as %q with %d upstream calls, want %q from Redis", got, h.count("test://reserve"), reserve)
	}
	c.stop()
	// The blip: every open connection to the upstream is cut (the watches'
	// listen streams among them); both replicas reconnect.
	up.srv.CloseClientConnections()
	for _, p := range []*proxy{a, b} {
		eventually(t, 10*time.Second, func() error {
			if !strings.Contains(p.Logs.String(), "watch re-established") {
				return fmt.Errorf("no reconnection yet")
			}
			return nil
		})
	}
	calls := h.count("test://doc")
	if after, _, _ := readAs(t, a.URL, "h+test://doc", ""); after == fresh || h.count("test://doc") != calls+1 {
		t.Errorf("after a blip the entry was still fresh: %q (calls %d → %d)", after, calls, h.count("test://doc"))
	}
	// Now the real outage: stale answers on both replicas.
	up.srv.CloseClientConnections()
	up.srv.Close()
	for i, p := range []*proxy{a, b} {
		text, ttl, _ := readAs(t, p.URL, "h+test://reserve", "")
		if ttl != 0 || text != reserve {
			t.Errorf("replica %d with the upstream down after a blip: %q ttl %d, want the stale %q", i, text, ttl, reserve)
		}
	}
}

// A client that dribbles its body is cut off after read_timeout, rather
// than holding a connection (and a goroutine) indefinitely.
func TestSlowBodyCutOff(t *testing.T) {
	p, _ := legacyFixture(t, "read_timeout: 1s\n")
	addr := strings.TrimPrefix(strings.TrimSuffix(p.URL, "/mcp"), "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: 1000\r\n\r\n{", addr)
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				close(closed)
				return
			}
		}
	}()
	for {
		select {
		case <-closed:
			// Bounds of a bounded wait: cut at read_timeout (1 s), not
			// after the dribbler's whole body or never.
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("the connection was cut after %v, want about read_timeout (1s)", took)
			}
			return
		case <-time.After(200 * time.Millisecond):
			if time.Since(start) > 6*time.Second {
				t.Fatal("a dribbling client held its connection for 6s with read_timeout 1s")
			}
			_, _ = conn.Write([]byte(" "))
		}
	}
}

// A legacy session's subscriptions obey subscriptions.max_uris_per_stream,
// as a listen does: beyond it -32602 naming the key, at the subscribe that
// crosses it (not later, when the session's stream is opened).
func TestLegacySubscriptionsBounded(t *testing.T) {
	p, _ := legacyFixture(t, "subscriptions: {max_uris_per_stream: 2}\n")
	cs := legacySDKClient(t, p.URL, "2025-11-25", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 2; i++ {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("web+test://web/%d", i)}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "web+test://web/3"})
	var we *sdkjsonrpc.Error
	if !errors.As(err, &we) || we.Code != -32602 || !strings.Contains(we.Message, "subscriptions.max_uris_per_stream") {
		t.Errorf("a third subscription with a bound of 2: %v", err)
	}
}
