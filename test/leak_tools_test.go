package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// The leak cases of the cache notes (../shared/design/cache-notes.md), run
// again against cached tool results: two replicas sharing Redis (private
// entries sealed), JWT principals with a fresh token for every call, an
// upstream forwarded the token and answering per principal, and a tool
// cache of scope private. The tool stamps its caller into every answer;
// every answer must be its caller's.
func TestLeakCasesWithToolResults(t *testing.T) {
	is := newIssuer(t)
	rs := redistest.Start(t)
	counts := &toolCounts{n: map[string]int{}}
	up := newSwitchable(t, modernHandler(cachedToolServer(counts)))
	other := &toolCounts{n: map[string]int{}}
	up2 := modernSDK(t, cachedToolServer(other))
	conf := is.authYAML("") + fmt.Sprintf("cache: {secret: leak-secret-0123456789, stale_if_error: 1m, redis: {url: %q}}\nupstreams:", rs.URL()) +
		httpUpstreamYAML("t", up.URL(), "forward_headers: [Authorization, X-Tenant]", "cache_key: principal", toolCacheYAML("60s", "private", "stale_if_error: true")) +
		httpUpstreamYAML("u", up2.URL, "forward_headers: [Authorization]", toolCacheYAML("60s", "public"))
	a, b := startProxy(t, conf), startProxy(t, conf)
	replicas := []*proxy{a, b}
	kids := []string{"rsa-1", "ec-1", "ed-1"}
	token := func(sub string) string {
		return is.mint(kids[rand.IntN(len(kids))], claims{"sub": sub, "jti": fmt.Sprint(rand.Int64())})
	}
	search := func(p *proxy, sub, q string) toolAnswer {
		return callToolAs(t, p.URL, token(sub), "t_search", fmt.Sprintf(`{"q":%q}`, q))
	}
	mine := func(a toolAnswer, sub string) bool { return strings.Contains(a.Text, "for=Bearer "+sub+" ") }

	t.Run("01 private never crosses principals", func(t *testing.T) {
		first := search(a, "alice", "k1")
		redisEntries(t, rs, "private", 1)
		for _, p := range replicas {
			if got := search(p, "bob", "k1"); !mine(got, "bob") {
				t.Errorf("bob was served %q", got.Text)
			}
			if got := search(p, "alice", "k1"); got.Text != first.Text || got.Cache == nil {
				t.Errorf("alice with a refreshed token: %+v, want her entry %q", got, first.Text)
			}
		}
		if n := counts.get(callKey("search", "k1", 0)); n != 2 {
			t.Errorf("upstream calls %d, want 2 (alice once, bob once)", n)
		}
	})
	t.Run("02 a private result is never under a public key", func(t *testing.T) {
		keys, _ := rs.Client().Keys(context.Background(), "*{t}*:public:*tools/call*").Result()
		for _, k := range keys {
			if !strings.Contains(k, ":lease:") { // a fill's lease names the public key, and holds no answer
				t.Errorf("a public tool result of a private tool cache: %v", k)
			}
		}
		if keys, _ := rs.Client().Keys(context.Background(), "*{t}*:private:*tools/call*").Result(); len(keys) == 0 {
			t.Error("no private tool result in Redis")
		}
	})
	t.Run("03 collapsing respects principals", func(t *testing.T) {
		subs := []string{"alice", "bob", "carol", "dave"}
		var wg sync.WaitGroup
		var leaks atomic.Int32
		for i := range 80 {
			sub, p := subs[i%len(subs)], replicas[i%2]
			tok := token(sub)
			wg.Go(func() {
				if got := callToolAs(t, p.URL, tok, "t_slow", `{"q":"k3"}`); !mine(got, sub) {
					leaks.Add(1)
				}
			})
		}
		wg.Wait()
		if leaks.Load() > 0 {
			t.Errorf("%d answers went to the wrong principal", leaks.Load())
		}
		if n := counts.get(callKey("slow", "k3", 0)); n < len(subs) || n > 2*len(subs) {
			t.Errorf("%d upstream calls for %d principals on 2 replicas", n, len(subs))
		}
	})
	t.Run("04 authentication before the cache", func(t *testing.T) {
		pub := callToolAs(t, a.URL, token("alice"), "u_search", `{"q":"k4"}`)
		for name, tok := range map[string]string{"expired": is.mint("rsa-1", claims{"sub": "alice", "exp": time.Now().Add(-time.Hour)}), "forged": is.forge("HS256", nil), "none": ""} {
			r := post(t, b.URL, as(tok)("tools/call", "u_search"), rpcBody(1, "tools/call", `"name":"u_search","arguments":{"q":"k4"}`))
			if r.Status != http.StatusUnauthorized || strings.Contains(string(r.Body), pub.Text) {
				t.Errorf("%s: HTTP %d %s", name, r.Status, r.Body)
			}
		}
	})
	t.Run("05 no hits across upstreams", func(t *testing.T) {
		search(a, "alice", "k5")
		callToolAs(t, a.URL, token("alice"), "u_search", `{"q":"k5"}`)
		if counts.get(callKey("search", "k5", 0)) != 1 || other.get(callKey("search", "k5", 0)) != 1 {
			t.Errorf("one upstream's result answered for the other")
		}
	})
	t.Run("06 other arguments miss", func(t *testing.T) {
		search(a, "alice", "k6")
		if got := search(b, "alice", "k6 "); got.Cache != nil {
			t.Errorf("other arguments hit: %+v", got)
		}
	})
	t.Run("07 forwarded context is keyed", func(t *testing.T) {
		call := func(tenant string) toolAnswer {
			h := as(token("alice"))("tools/call", "t_search")
			h.Set("X-Tenant", tenant)
			var res struct {
				Meta map[string]any `json:"_meta"`
			}
			post(t, a.URL, h, rpcBody(1, "tools/call", `"name":"t_search","arguments":{"q":"k7"}`)).result(t, &res)
			return toolAnswer{Cache: mapOf(res.Meta["io.manifold/cache"])}
		}
		call("a")
		if call("a").Cache == nil || call("b").Cache != nil {
			t.Errorf("X-Tenant is not keyed as it should be")
		}
	})
	t.Run("08 another principal's error evicts nothing", func(t *testing.T) {
		first := search(a, "alice", "k8")
		r := post(t, a.URL, as(token("denied"))("tools/call", "t_search"), rpcBody(1, "tools/call", `"name":"t_search","arguments":{"q":"k8"}`))
		if r.Error == nil && !strings.Contains(string(r.Result), `"isError":true`) {
			t.Fatalf("the denied principal got %s", r.Body)
		}
		if got := search(a, "alice", "k8"); got.Text != first.Text {
			t.Errorf("alice's entry after the denial: %q, was %q", got.Text, first.Text)
		}
	})
	t.Run("09 replies are their own", func(t *testing.T) {
		tok := token("alice")
		send := func(id int, trace string) *rawResponse {
			meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"traceparent":"` + trace + `"}`
			return post(t, a.URL, as(tok)("tools/call", "t_search"), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t_search","arguments":{"q":"k9"},%s}}`, id, meta))
		}
		send(101, "00-11111111111111111111111111111111-2222222222222222-01")
		second := send(202, "00-33333333333333333333333333333333-4444444444444444-01")
		if string(second.ID) != "202" || strings.Contains(string(second.Body), "1111111111") || !strings.Contains(string(second.Body), "io.manifold/cache") {
			t.Errorf("the second call: %s", second.Body)
		}
	})
	t.Run("12 randomized over replicas, with a Redis restart", func(t *testing.T) {
		subs := []string{"alice", "bob", "carol", "dave", "erin"}
		var wrong, done atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					sub, p := subs[rand.IntN(len(subs))], replicas[rand.IntN(2)]
					q := fmt.Sprintf("r%d", rand.IntN(3))
					r := post(t, p.URL, as(token(sub))("tools/call", "t_search"), rpcBody(1, "tools/call", fmt.Sprintf(`"name":"t_search","arguments":{"q":%q}`, q)))
					if r.Error == nil && !strings.Contains(string(r.Result), "for=Bearer "+sub+" ") {
						wrong.Add(1)
					}
					if done.Add(1) == 200 {
						rs.Restart()
					}
				}
			})
		}
		wg.Wait()
		if wrong.Load() > 0 {
			t.Fatalf("%d answers reached the wrong principal", wrong.Load())
		}
	})
	t.Run("10 degraded paths keep the scope", func(t *testing.T) {
		search(a, "alice", "k10")
		rs.Stop()
		if got := search(a, "bob", "k10"); !mine(got, "bob") {
			t.Errorf("with Redis down bob got %q", got.Text)
		}
		up.down()
		r := post(t, a.URL, as(token("carol"))("tools/call", "t_search"), rpcBody(1, "tools/call", `"name":"t_search","arguments":{"q":"k10"}`))
		if r.Error == nil {
			t.Errorf("with the upstream down, carol was served %s", r.Body)
		}
		if got := search(a, "alice", "k10"); !mine(got, "alice") {
			t.Errorf("alice, upstream down: %q (her entry, never another's)", got.Text)
		}
	})
}

func mapOf(v any) map[string]any { m, _ := v.(map[string]any); return m }
