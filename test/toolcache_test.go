package test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// toolCacheYAML is an upstream's tool cache.
func toolCacheYAML(ttl, scope string, extra ...string) string {
	s := fmt.Sprintf("tool_cache: {ttl: %s, scope: %s", ttl, scope)
	for _, e := range extra {
		s += ", " + e
	}
	return s + "}"
}

// A read-only tool called twice with the same arguments makes one upstream
// call, whatever the spelling of its arguments, and the cached answer
// says so in its _meta; a call with other arguments, by another principal
// (private), of a tool without the annotation (though the globs name it),
// answered with isError, answered input_required (and its retry), or with
// a progressToken, reaches the upstream every time.
func TestToolCacheServesReadOnlyResults(t *testing.T) {
	counts := &toolCounts{n: map[string]int{}}
	up := modernSDK(t, cachedToolServer(counts))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("t", up.URL, "forward_headers: [Authorization]", toolCacheYAML("60s", "private", `tools: ["*"]`)))
	first := callToolAs(t, p.URL, "token-A", "t_search", `{"q":"a","n":1}`)
	if first.Cache != nil || first.Text != "search q=a n=1 for=Bearer token-A call=1" {
		t.Fatalf("first call: %+v", first)
	}
	for _, args := range []string{`{"q":"a","n":1}`, `{"n":1.0,"q":"a"}`, `{ "q" : "a", "n" : 1e0 }`} {
		again := callToolAs(t, p.URL, "token-A", "t_search", args)
		if again.Text != first.Text || again.Cache["tier"] != "memory" || again.Cache["ageMs"] == nil {
			t.Errorf("the same call spelt %s: %q, _meta %v", args, again.Text, again.Cache)
		}
	}
	if n := counts.get(callKey("search", "a", 1)); n != 1 {
		t.Errorf("one search, asked 4 times: %d upstream calls", n)
	}
	// times calls of tool (each must reach the upstream) as tok.
	reaches := func(what string, times int, tok, tool, args string, meta ...string) {
		t.Helper()
		before := counts.total(strings.TrimPrefix(tool, "t_"))
		for range times {
			if a := callToolAs(t, p.URL, tok, tool, args, meta...); a.Cache != nil || !strings.Contains(a.Text, "for=Bearer "+tok) && tool != "t_ask" {
				t.Errorf("%s: answered from the cache: %+v", what, a)
			}
		}
		if n := counts.total(strings.TrimPrefix(tool, "t_")) - before; n != times {
			t.Errorf("%s, %d times: %d upstream calls", what, times, n)
		}
	}
	reaches("another principal's call (private)", 1, "token-B", "t_search", `{"q":"a","n":1}`)
	reaches("other arguments", 1, "token-A", "t_search", `{"q":"a","n":2}`)
	reaches("a tool without readOnlyHint", 2, "token-A", "t_write", `{"q":"a"}`)
	reaches("an isError answer", 2, "token-A", "t_fail", `{"q":"a"}`)
	reaches("an input_required round", 2, "token-A", "t_ask", `{}`)
	reaches("a call with a progressToken", 2, "token-A", "t_search", `{"q":"p"}`, `"progressToken":"tok-1"`)
	// The retry of an input_required round reaches the upstream, and is
	// not stored either.
	before := counts.get("ask ")
	for range 2 {
		r := post(t, p.URL, as("token-A")("tools/call", "t_ask"), rpcBody(1, "tools/call", `"name":"t_ask","arguments":{},"requestState":"state-ask","inputResponses":{"q":{"action":"accept","content":{}}}`))
		if !strings.Contains(string(r.Result), "answered") || strings.Contains(string(r.Result), "io.manifold/cache") {
			t.Errorf("the retry: %s", r.Body)
		}
	}
	if n := counts.get("ask ") - before; n != 2 {
		t.Errorf("two retries: %d upstream calls", n)
	}
}

// Scope public shares a result among callers; tools the globs leave out
// are not cached, read-only or not; and without a tool cache nothing is.
func TestToolCacheScopeAndGlobs(t *testing.T) {
	counts := &toolCounts{n: map[string]int{}}
	up := modernSDK(t, cachedToolServer(counts))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("t", up.URL, "forward_headers: [Authorization]", toolCacheYAML("60s", "public", `tools: ["sea*"]`))+
		httpUpstreamYAML("off", up.URL))
	a := callToolAs(t, p.URL, "token-A", "t_search", `{"q":"shared"}`)
	b := callToolAs(t, p.URL, "token-B", "t_search", `{"q":"shared"}`)
	if b.Text != a.Text || b.Cache["tier"] != "memory" {
		t.Errorf("public: B got %q (%v), A's was %q", b.Text, b.Cache, a.Text)
	}
	for _, tool := range []string{"t_slow", "off_search"} {
		callToolAs(t, p.URL, "token-A", tool, `{"q":"g"}`)
		if again := callToolAs(t, p.URL, "token-A", tool, `{"q":"g"}`); again.Cache != nil {
			t.Errorf("%s was cached: %+v", tool, again)
		}
	}
}

// The tool cache with the other upstreams: mcp-go over HTTP in either era
// and over stdio, and a go-sdk server over stdio; and a legacy caller (the go-sdk client
// in 2025-11-25) is answered from it too.
func TestToolCacheOverEveryUpstreamKind(t *testing.T) {
	modern, legacy := &toolCounts{n: map[string]int{}}, &toolCounts{n: map[string]int{}}
	gm, gl := serveHTTP(t, mcpgoCachedTools(modern, true)), serveHTTP(t, mcpgoCachedTools(legacy, false))
	cache := toolCacheYAML("60s", "private")
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("gm", gm.URL, cache)+httpUpstreamYAML("gl", gl.URL, cache)+
		childUpstream("kid", "sdk-cached:kid")+"    "+cache+"\n"+childUpstream("gokid", "mcpgo-cached:gokid")+"    "+cache+"\n")
	for _, c := range []struct {
		tool   string
		counts *toolCounts
	}{{"gm_search", modern}, {"gl_search", legacy}, {"kid_search", nil}, {"gokid_search", nil}} {
		first := callToolAs(t, p.URL, "", c.tool, `{"q":"x","n":3}`)
		again := callToolAs(t, p.URL, "", c.tool, `{"n":3,"q":"x"}`)
		if again.Text != first.Text || !strings.HasSuffix(first.Text, "call=1") || again.Cache["tier"] != "memory" {
			t.Errorf("%s: %q then %q (%v)", c.tool, first.Text, again.Text, again.Cache)
		}
		if c.counts != nil && c.counts.get(callKey("search", "x", 3)) != 1 {
			t.Errorf("%s: %d upstream calls", c.tool, c.counts.get(callKey("search", "x", 3)))
		}
		write := strings.Replace(c.tool, "search", "write", 1)
		callToolAs(t, p.URL, "", write, `{"q":"x"}`)
		if a := callToolAs(t, p.URL, "", write, `{"q":"x"}`); a.Cache != nil || !strings.HasSuffix(a.Text, "call=2") {
			t.Errorf("%s: %+v", write, a)
		}
	}
	// A legacy session's requests carry its client's capabilities, which
	// key the entry as they do a read's: its own entry, then.
	cs := sdkClient(t, p.URL, "2025-11-25")
	var texts []string
	for i := range 2 {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "gm_search", Arguments: map[string]any{"q": "y", "n": 3}})
		if err != nil || len(res.Content) == 0 || (i == 1) != (res.Meta["io.manifold/cache"] != nil) {
			t.Fatalf("a legacy caller's call %d: %v %+v", i, err, res)
		}
		texts = append(texts, res.Content[0].(*mcp.TextContent).Text)
	}
	if texts[0] != texts[1] || modern.get(callKey("search", "y", 3)) != 1 {
		t.Errorf("a legacy caller, twice: %q, %d upstream calls", texts, modern.get(callKey("search", "y", 3)))
	}
}

// Concurrent identical calls of a slow read-only tool make one upstream
// call; those of another principal make their own.
func TestToolCacheCoalesces(t *testing.T) {
	counts := &toolCounts{n: map[string]int{}}
	up := modernSDK(t, cachedToolServer(counts))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("t", up.URL, "forward_headers: [Authorization]", toolCacheYAML("60s", "private")))
	done := make(chan toolAnswer)
	for i := range 20 {
		tok := []string{"token-A", "token-B"}[i%2]
		go func() { done <- callToolAs(t, p.URL, tok, "t_slow", `{"q":"c"}`) }()
	}
	for range 20 {
		if a := <-done; !strings.Contains(a.Text, "for=Bearer token-") {
			t.Errorf("answer %+v", a)
		}
	}
	if n := counts.get(callKey("slow", "c", 0)); n != 2 {
		t.Errorf("20 concurrent calls by 2 principals: %d upstream calls, want 2", n)
	}
}

// notifications/tools/list_changed drops the upstream's cached results,
// and the new list is what says what may be cached: a tool that is no
// longer read-only is not cached any more.
func TestToolCacheDroppedOnToolsListChanged(t *testing.T) {
	counts := &toolCounts{n: map[string]int{}}
	s := cachedToolServer(counts)
	up, lt := trackedModern(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("t", up.URL, toolCacheYAML("60s", "public")))
	// The upstream's calls are counted: the watch is up first, so that no
	// call is made without it (one such would be revalidated once the
	// watch is up: a call more). Under the whole suite it once took seconds.
	eventually(t, 10*time.Second, func() error {
		if lt.streams() == 0 {
			return errors.New("no subscriptions/listen stream open at the upstream")
		}
		return nil
	})
	callToolAs(t, p.URL, "", "t_search", `{"q":"l"}`)
	if a := callToolAs(t, p.URL, "", "t_search", `{"q":"l"}`); a.Cache == nil {
		t.Fatalf("not cached: %+v", a)
	}
	// The server's list changes (a tool added): the cached result goes.
	s.AddTool(&mcp.Tool{Name: "fresh", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("fresh"), nil
	})
	eventually(t, 10*time.Second, func() error {
		if a := callToolAs(t, p.URL, "", "t_search", `{"q":"l"}`); a.Cache != nil {
			return fmt.Errorf("still cached: %+v", a.Cache)
		}
		return nil
	})
	if n := counts.get(callKey("search", "l", 0)); n != 2 {
		t.Errorf("upstream calls %d, want 2 (before and after the change)", n)
	}
	// search is read-only no more.
	s.RemoveTools("search")
	s.AddTool(&mcp.Tool{Name: "search", InputSchema: objectSchema(`{"q":{"type":"string"}}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(fmt.Sprint("writable call=", counts.add("writable"))), nil
	})
	// Within less than the 10 s a listing is believed for otherwise: the
	// list change is what made Manifold read it again.
	eventually(t, 5*time.Second, func() error {
		callToolAs(t, p.URL, "", "t_search", `{"q":"l"}`)
		if a := callToolAs(t, p.URL, "", "t_search", `{"q":"l"}`); a.Cache != nil || !strings.HasPrefix(a.Text, "writable") {
			return fmt.Errorf("after the annotation went: %+v", a)
		}
		return nil
	})
}

// A reload that changes the upstream drops its cached results: even with
// stale_if_error, they do not stand in for the new one when it cannot be
// reached, as they do for the same upstream unchanged.
func TestToolCacheDroppedOnReload(t *testing.T) {
	counts := &toolCounts{n: map[string]int{}}
	up := newSwitchable(t, modernHandler(cachedToolServer(counts)))
	conf := func(timeout string) string {
		return "cache: {stale_if_error: 1m}\nupstreams:" + httpUpstreamYAML("t", up.URL(), "timeout: "+timeout, toolCacheYAML("1s", "public", "stale_if_error: true"))
	}
	p, reload := startReloadable(t, conf("5s"))
	callToolAs(t, p.URL, "", "t_search", `{"q":"r"}`)
	up.down()
	// Unchanged, an expired result stands in for the unreachable upstream
	// (fresh, it is served as it is; the 1s ttl passes).
	eventually(t, 5*time.Second, func() error {
		if a := callToolAs(t, p.URL, "", "t_search", `{"q":"r"}`); a.Cache["tier"] != "stale" || !strings.HasSuffix(a.Text, "call=1") {
			return fmt.Errorf("with the upstream down: %+v", a)
		}
		return nil
	})
	up.up()
	reload(conf("6s"))
	// The new upstream is reached once (a tool that is never cached), then
	// goes down: the result that stood in a moment ago must not now.
	callToolAs(t, p.URL, "", "t_write", `{"q":"w"}`)
	up.down()
	if r := callToolRaw(t, p.URL, "", "t_search", `{"q":"r"}`); r.Error == nil {
		t.Errorf("after a reload that changed the upstream, its old result stood in: %s", r.Body)
	}
}

// Two replicas share an entry through Redis, sealed there; the second replica's answer says it came from
// Redis.
func TestToolCacheSharedThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	counts := &toolCounts{n: map[string]int{}}
	up := modernSDK(t, cachedToolServer(counts))
	conf := fmt.Sprintf("cache: {secret: tool-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL()) +
		httpUpstreamYAML("t", up.URL, "forward_headers: [Authorization]", toolCacheYAML("60s", "private"))
	a, b := startProxy(t, conf), startProxy(t, conf)
	first := callToolAs(t, a.URL, "token-A", "t_search", `{"q":"shared-secret-text"}`)
	redisEntries(t, rs, "private", 1)
	second := callToolAs(t, b.URL, "token-A", "t_search", `{"q":"shared-secret-text"}`)
	if second.Text != first.Text || second.Cache["tier"] != "redis" {
		t.Errorf("replica B: %q (%v), A's %q", second.Text, second.Cache, first.Text)
	}
	if n := counts.get(callKey("search", "shared-secret-text", 0)); n != 1 {
		t.Errorf("two replicas: %d upstream calls", n)
	}
	keys, _ := rs.Client().Keys(context.Background(), "*:private:*").Result()
	for _, k := range keys {
		v, _ := rs.Client().Get(context.Background(), k).Result()
		if strings.Contains(v, "shared-secret-text") {
			t.Errorf("a private tool result is in Redis in the clear: %q", k)
		}
	}
	if other := callToolAs(t, b.URL, "token-B", "t_search", `{"q":"shared-secret-text"}`); other.Cache != nil || !strings.Contains(other.Text, "token-B") {
		t.Errorf("another principal on replica B: %+v", other)
	}
}

// A cached answer is counted in the metrics and the audit log with its
// tier, as a read is.
func TestToolCacheInMetricsAndAudit(t *testing.T) {
	auditFile := t.TempDir() + "/audit.log"
	counts := &toolCounts{n: map[string]int{}}
	up := modernSDK(t, cachedToolServer(counts))
	p := startProxy(t, fmt.Sprintf("audit: {file: %q}\nupstreams:", auditFile)+httpUpstreamYAML("t", up.URL, toolCacheYAML("60s", "public")))
	callToolAs(t, p.URL, "", "t_search", `{"q":"m"}`)
	hits := func() float64 {
		v, _ := sample(scrapeFamilies(t, strings.TrimSuffix(p.URL, "/mcp")+"/metrics"), "manifold_cache_hits_total", "tier", "memory", "upstream", "t")
		return v
	}
	before := hits()
	callToolAs(t, p.URL, "", "t_search", `{"q":"m"}`)
	if n := hits() - before; n != 1 {
		t.Errorf("the cached call counted %v memory hits, want 1", n)
	}
	_, lines := readAudit(t, auditFile, 2)
	var tiers []string
	for _, l := range lines {
		if l.Method == "tools/call" {
			tiers = append(tiers, l.Tier)
		}
	}
	if fmt.Sprint(tiers) != "[fill memory]" {
		t.Errorf("audit tiers of the two calls: %v", tiers)
	}
}
