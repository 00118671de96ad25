package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// The leak suite: one test per case of "Leak cases a shared cache must pass"
// (../shared/design/cache-notes.md), through Manifold, against real go-sdk
// and mcp-go upstreams and a real Redis. Case 11 (every stored value carries
// its identity, checked on read) and the generation race are exercised at the
// tier level in package cache, where a value can be planted in Redis.

// Case 1: caller B never receives caller A's private entry for the same
// method and parameters, from memory or from Redis.
func TestLeak01PrivateNeverCrossesCredentials(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	// 2 s a Redis command (not 100 ms), so that a loaded machine does not
	// skip the lookup or the write the sharing below needs.
	shared := fmt.Sprintf("cache: {secret: leak-secret-0123456789, redis: {url: %q, timeout: 2s}}\n", rs.URL())
	a, b := cachedProxy(t, up.URL, shared), cachedProxy(t, up.URL, shared)
	first, _, _ := readAs(t, a.URL, "h+test://priv/1", "token-A")
	// A's entry is in Redis once replica a's write after its answer has
	// landed: then replica b serves it to her without a call.
	redisEntries(t, rs, "private", 1)
	if again, _, _ := readAs(t, b.URL, "h+test://priv/1", "token-A"); again != first || h.count("test://priv/1") != 1 {
		t.Fatalf("replica b served A %q (%d upstream calls), want her entry %q from Redis", again, h.count("test://priv/1"), first)
	}
	for _, p := range []*proxy{a, b} {
		if text, _, _ := readAs(t, p.URL, "h+test://priv/1", "token-B"); !strings.Contains(text, "for=Bearer token-B") {
			t.Errorf("B was served %q", text)
		}
	}
}

// Case 2: a private answer is never stored under a public key; a missing,
// unknown or mis-cased cacheScope is private.
func TestLeak02UnclearScopeIsPrivate(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	_, _, scope := readAs(t, p.URL, "h+test://mis/Public", "token-A")
	text, _, _ := readAs(t, p.URL, "h+test://mis/Public", "token-B")
	if scope != "private" || !strings.Contains(text, "token-B") || h.count("test://mis/Public") != 2 {
		t.Errorf(`"Public": scope out %q, B got %q, %d calls`, scope, text, h.count("test://mis/Public"))
	}
	// A legacy server sends no scope at all: default_scope (private unless
	// configured) applies.
	legacy := mcpgoLegacy(t, "old", 1)
	q := startProxy(t, "upstreams:"+httpUpstreamYAML("old", legacy.URL, "default_ttl: 60s", "forward_headers: [Authorization]"))
	for _, tok := range []string{"token-A", "token-B", "token-A"} {
		_, ttl, scope := readAs(t, q.URL, "old+test://old/0", tok)
		if scope != "private" || ttl <= 0 {
			t.Errorf("legacy answer hints: %d %q", ttl, scope)
		}
	}
	if n := legacy.Calls.get("resources/read"); n != 2 {
		t.Errorf("legacy upstream reads: %d, want 2 (A and B; A's second read cached)", n)
	}
}

// Case 3: collapsed concurrent misses never hand a private answer to a waiter
// with another credential, although the scope is only learned from the answer.
func TestLeak03CollapsingRespectsCredentials(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	tokens := []string{"token-A", "token-B", "token-C", "token-D"}
	var wg sync.WaitGroup
	var leaks atomic.Int32
	for i := 0; i < 80; i++ {
		tok := tokens[i%len(tokens)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if text, _, _ := readAs(t, p.URL, "h+test://priv/slow", tok); !strings.Contains(text, "for=Bearer "+tok+" ") {
				leaks.Add(1)
			}
		}()
	}
	wg.Wait()
	if leaks.Load() > 0 {
		t.Errorf("%d answers went to the wrong credential", leaks.Load())
	}
	if n := h.count("test://priv/slow"); n < len(tokens) || n > 2*len(tokens) {
		t.Errorf("upstream calls %d for %d credentials", n, len(tokens))
	}
}

// Case 4: with downstream auth on, the cache is consulted only after the
// caller is authenticated: a rejected caller gets nothing, public entries
// included.
func TestLeak04AuthBeforeCache(t *testing.T) {
	h, _, p := hintedProxy(t, "auth: {bearer_tokens: [good-token-0123456789], authorization_servers: [\"https://idp.example.com\"]}\n")
	text, _, _ := readAs(t, p.URL, "h+test://pub/1", "good-token-0123456789")
	for _, tok := range []string{"", "wrong-token", "good-token-012345678", "good-token-01234567890"} {
		hd := headers("resources/read", "h+test://pub/1")
		if tok != "" {
			hd.Set("Authorization", "Bearer "+tok)
		}
		r := post(t, p.URL, hd, rpcBody(1, "resources/read", `"uri":"h+test://pub/1"`))
		if r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" || strings.Contains(string(r.Body), text) {
			t.Errorf("token %q: HTTP %d %s", tok, r.Status, r.Body)
		}
	}
	if h.count("test://pub/1") != 1 {
		t.Errorf("upstream calls %d", h.count("test://pub/1"))
	}
}

// Case 5: no hits across upstreams for the same method and parameters.
// (Protocol versions are keyed too; the digest test in package cache shows
// it, since the endpoint accepts only one version.)
func TestLeak05NoHitsAcrossUpstreams(t *testing.T) {
	h1, h2 := newHintedServer(), newHintedServer()
	u1, u2 := modernSDK(t, h1.Server), modernSDK(t, h2.Server)
	pp := startProxy(t, "upstreams:"+httpUpstreamYAML("one", u1.URL)+httpUpstreamYAML("two", u2.URL))
	readAs(t, pp.URL, "one+test://pub/5", "")
	readAs(t, pp.URL, "two+test://pub/5", "")
	if h1.count("test://pub/5") != 1 || h2.count("test://pub/5") != 1 {
		t.Errorf("calls %d %d: one upstream's entry answered for the other", h1.count("test://pub/5"), h2.count("test://pub/5"))
	}
}

// Case 6: canonical keys: the same params in another key order or spacing
// hit; a different uri or cursor misses.
func TestLeak06CanonicalKeys(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	hd := headers("resources/read", "h+test://pub/6")
	bodies := []string{
		`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"h+test://pub/6",` + metaOK + `}}`,
		`{"params":{` + metaOK + `,"uri":"h+test://pub/6"},"method":"resources/read","id":2,"jsonrpc":"2.0"}`,
		"{\n \"jsonrpc\": \"2.0\", \"id\": 3, \"method\": \"resources/read\",\n \"params\": { \"_meta\": {\"io.modelcontextprotocol/clientCapabilities\": {}, \"io.modelcontextprotocol/protocolVersion\": \"2026-07-28\"}, \"uri\": \"h+test://pub/6\" } }",
	}
	for _, b := range bodies {
		var rr readResult
		post(t, p.URL, hd, b).result(t, &rr)
	}
	if n := h.count("test://pub/6"); n != 1 {
		t.Errorf("equivalent requests cost %d calls", n)
	}
	readAs(t, p.URL, "h+test://pub/7", "")
	if h.count("test://pub/7") != 1 {
		t.Error("another uri was answered from the cache")
	}
	// Lists: each cursor is its own entry.
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 5, pageSize: 2, ttlMs: 60_000, scope: "public"}))
	q := startProxy(t, "cursor_secret: leak-cursor-secret-0123\nupstreams:"+httpUpstreamYAML("a", alpha.URL))
	pages := listAll(t, q.URL, "resources/list")
	again := listAll(t, q.URL, "resources/list")
	if fmt.Sprint(uris(pages)) != fmt.Sprint(uris(again)) || len(pages) < 3 {
		t.Errorf("paging through the cache changed the listing: %v vs %v", uris(pages), uris(again))
	}
	if n := alpha.Calls.get("resources/list"); n != len(pages) {
		t.Errorf("%d pages cost %d upstream list calls over two listings", len(pages), n)
	}
}

// Case 7: every header or _meta member forwarded upstream that can change
// the answer is in the key.
func TestLeak07ForwardedContextKeyed(t *testing.T) {
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("h", up.URL, "forward_headers: [Authorization, X-Tenant]"))
	read := func(tenant, flag string) {
		hd := headers("resources/read", "h+test://pub/7")
		hd.Set("X-Tenant", tenant)
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"example.com/flag":"` + flag + `"}`
		var rr readResult
		post(t, p.URL, hd, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"h+test://pub/7",`+meta+`}}`).result(t, &rr)
	}
	read("a", "x")
	read("a", "x")
	read("b", "x")
	read("a", "y")
	if n := h.count("test://pub/7"); n != 3 {
		t.Errorf("calls %d, want 3 (tenant a, tenant b, another _meta flag)", n)
	}
}

// Case 8: never stored: input_required, MRTR retries, errors, oversized
// bodies; an error for B never evicts A's entry.
func TestLeak08NeverStored(t *testing.T) {
	h := newHintedServer()
	var asks atomic.Int32
	h.AddResource(&mcp.Resource{URI: "test://ask", Name: "ask"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		asks.Add(1)
		if req.Params.RequestState == "" {
			return &mcp.ReadResourceResult{InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{Message: "?", RequestedSchema: map[string]any{"type": "object"}}}, RequestState: "st"}, nil
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://ask", Text: "done"}}}, nil
	})
	up := modernSDK(t, h.Server)
	p := cachedProxy(t, up.URL, "cache: {max_entry_bytes: 1MiB}\n")
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	for i := 0; i < 2; i++ {
		post(t, p.URL, headers("resources/read", "h+test://ask"), `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"h+test://ask",`+meta+`}}`)
		post(t, p.URL, headers("resources/read", "h+test://ask"), `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"h+test://ask","requestState":"st","inputResponses":{"q":{"action":"accept","content":{}}},`+meta+`}}`)
	}
	if asks.Load() != 4 {
		t.Errorf("input_required and its retries: %d upstream calls, want 4", asks.Load())
	}
	// Oversized: 2 MiB over a 1 MiB max_entry_bytes.
	readAs(t, p.URL, "h+test://big", "")
	readAs(t, p.URL, "h+test://big", "")
	if n := h.count("test://big"); n != 2 {
		t.Errorf("an oversized answer was cached (%d calls)", n)
	}
	// Errors are not stored, and B's error does not evict A's entry.
	a1, _, _ := readAs(t, p.URL, "h+test://priv/8", "token-A")
	for i := 0; i < 2; i++ {
		hd := headers("resources/read", "h+test://priv/8")
		hd.Set("Authorization", "Bearer denied")
		if r := post(t, p.URL, hd, rpcBody(1, "resources/read", `"uri":"h+test://priv/8"`)); r.Error == nil {
			t.Fatalf("denied caller got %s", r.Body)
		}
	}
	a2, _, _ := readAs(t, p.URL, "h+test://priv/8", "token-A")
	if a1 != a2 || h.count("test://priv/8") != 1 {
		t.Errorf("A's entry after B's errors: %q then %q, %d calls (the denials are not counted)", a1, a2, h.count("test://priv/8"))
	}
	// An upstream failing with HTTP 500 is not stored either.
	var fails atomic.Int32
	broken := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "server/discover" {
			modernHandler(newSDKServer("b", sdkOptions{})).ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Mcp-Method") == "resources/read" {
			fails.Add(1)
		}
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	q := startProxy(t, "upstreams:"+httpUpstreamYAML("b", broken.URL))
	for i := 0; i < 2; i++ {
		post(t, q.URL, headers("resources/read", "b+test://x"), rpcBody(1, "resources/read", `"uri":"b+test://x"`)).wantError(t, http.StatusOK, -32603)
	}
	if fails.Load() != 2 {
		t.Errorf("HTTP 500: %d upstream calls, want 2", fails.Load())
	}
}

// Case 9: every reply carries its own request's id, and no request-scoped
// _meta of another request is replayed.
func TestLeak09RepliesAreTheirOwn(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	send := func(id int, trace string) *rawResponse {
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"traceparent":"` + trace + `"}`
		return post(t, p.URL, headers("resources/read", "h+test://trace"), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/read","params":{"uri":"h+test://trace",%s}}`, id, meta))
	}
	first := send(101, "00-11111111111111111111111111111111-2222222222222222-01")
	second := send(202, "00-33333333333333333333333333333333-4444444444444444-01")
	if string(first.ID) != "101" || string(second.ID) != "202" {
		t.Errorf("ids %s %s", first.ID, second.ID)
	}
	if strings.Contains(string(second.Body), "1111111111") {
		t.Errorf("the first request's trace context was replayed: %s", second.Body)
	}
	if h.count("test://trace") != 1 {
		t.Errorf("calls %d", h.count("test://trace"))
	}
}

// Case 10: degraded paths (Redis down, upstream down, stale-if-error) never
// relax the scope.
func TestLeak10DegradedPathsKeepScope(t *testing.T) {
	rs := redistest.Start(t)
	_, up, p := hintedProxy(t, fmt.Sprintf("cache: {secret: leak-secret-0123456789, stale_if_error: 1m, redis: {url: %q}}\n", rs.URL()))
	readAs(t, p.URL, "h+test://priv/10", "token-A")
	rs.Stop()
	if text, _, _ := readAs(t, p.URL, "h+test://priv/10", "token-B"); !strings.Contains(text, "token-B") {
		t.Errorf("with Redis down B got %q", text)
	}
	// A's entry goes stale and the upstream dies: A may get it stale, B
	// may not.
	readAs(t, p.URL, "h+test://short", "token-A")
	time.Sleep(1600 * time.Millisecond) // past its 1.5 s freshness, by the process's clock
	up.srv.CloseClientConnections()
	up.srv.Close()
	if _, ttl, _ := readAs(t, p.URL, "h+test://short", "token-B"); ttl != 0 {
		t.Errorf("stale public entry ttl %d", ttl)
	}
	hd := headers("resources/read", "h+test://priv/10")
	hd.Set("Authorization", "Bearer token-C")
	if r := post(t, p.URL, hd, rpcBody(1, "resources/read", `"uri":"h+test://priv/10"`)); r.Error == nil {
		t.Errorf("with the upstream down, C was served %s", r.Body)
	}
}

// Case 12: randomized concurrency across two replicas sharing Redis, with
// cancellations and a Redis restart in the middle. The upstream stamps the
// caller's identity into every private answer; every answer must match its
// caller.
func TestLeak12RandomizedConcurrency(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	shared := fmt.Sprintf("cache: {secret: leak-secret-0123456789, redis: {url: %q, timeout: 200ms}}\n", rs.URL())
	replicas := []*proxy{cachedProxy(t, up.URL, shared), cachedProxy(t, up.URL, shared)}
	tokens := []string{"", "token-A", "token-B", "token-C", "token-D", "token-E"}
	const workers, perWorker = 24, 60
	var checked, cancelled, wrong atomic.Int32
	var wg sync.WaitGroup
	restartAt, restarted := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(restarted)
		<-restartAt
		rs.Stop()
		time.Sleep(300 * time.Millisecond) // an outage that lasts, under the load
		rs.Restart()
	}()
	var once sync.Once
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < perWorker; i++ {
				if w == 0 && i == perWorker/3 {
					once.Do(func() { close(restartAt) })
				}
				p := replicas[rng.IntN(len(replicas))]
				tok := tokens[rng.IntN(len(tokens))]
				uri := fmt.Sprintf("h+test://priv/%d", rng.IntN(6))
				if rng.IntN(4) == 0 {
					uri = fmt.Sprintf("h+test://pub/%d", rng.IntN(4))
				}
				if rng.IntN(8) == 0 {
					uri = "h+test://priv/slow"
				}
				hd := headers("resources/read", uri)
				if tok != "" {
					hd.Set("Authorization", "Bearer "+tok)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+rng.IntN(400))*time.Millisecond)
				text, err := readRaw(ctx, p.URL, hd, uri)
				cancel()
				if err != nil {
					cancelled.Add(1)
					continue
				}
				checked.Add(1)
				if strings.Contains(uri, "priv") && !strings.HasPrefix(text, "for="+bearer(tok)+" ") {
					wrong.Add(1)
					t.Errorf("caller %q read %s and got %q", tok, uri, text)
				}
			}
		}()
	}
	wg.Wait()
	<-restarted
	if wrong.Load() > 0 {
		t.Fatalf("%d answers reached the wrong caller", wrong.Load())
	}
	if checked.Load() < workers*perWorker/2 {
		t.Errorf("only %d of %d requests completed (%d cancelled)", checked.Load(), workers*perWorker, cancelled.Load())
	}
	t.Logf("%d answers checked, %d cancelled", checked.Load(), cancelled.Load())
}

func bearer(tok string) string {
	if tok == "" {
		return ""
	}
	return "Bearer " + tok
}

// readRaw reads uri, returning the text or the error (including the
// caller's own cancellation).
func readRaw(ctx context.Context, url string, h http.Header, uri string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r struct {
		Result *readResult `json:"result"`
		Error  any         `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	if r.Result == nil || len(r.Result.Contents) == 0 {
		return "", fmt.Errorf("error answer: %v", r.Error)
	}
	return r.Result.Contents[0].Text, nil
}

// Case 1 for legacy callers: two 2025-11-25 sessions with different
// credentials reading one private resource each get their own answer. Their
// credential headers key the entry, and are forwarded, as a modern
// caller's are.
func TestLeak01LegacySessionsKeepCredentials(t *testing.T) {
	h, _, p := hintedProxy(t, "")
	read := `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"h+test://priv/legacy"}}`
	for _, tok := range []string{"token-A", "token-B"} {
		hd := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + tok}}
		r := post(t, p.URL, hd, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
		hd.Set("Mcp-Session-Id", r.Header.Get("Mcp-Session-Id"))
		hd.Set("MCP-Protocol-Version", "2025-11-25")
		var res readResult
		post(t, p.URL, hd, read).result(t, &res)
		if len(res.Contents) != 1 || !strings.HasPrefix(res.Contents[0].Text, "for=Bearer "+tok+" ") {
			t.Errorf("%s was served %+v", tok, res.Contents)
		}
	}
	if n := h.count("test://priv/legacy"); n != 2 {
		t.Errorf("upstream calls %d, want 2", n)
	}
}
