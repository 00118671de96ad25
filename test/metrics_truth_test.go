package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// A listen and a legacy session's resources/subscribe are requests like any
// other: counted in manifold_requests_total by method and outcome, a listen
// once it is acknowledged (its stream goes on, counted in
// manifold_subscriptions_open), a refused one under its error code.
func TestListenAndSubscribeCounted(t *testing.T) {
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", up.URL))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})

	st := listen(t, o.MCP, 7, `{"resourceSubscriptions":["a+test://pub/1"]}`)
	st.expect(t, 7, "notifications/subscriptions/acknowledged", "")
	bad := listen(t, o.MCP, 8, `"not a filter"`)
	bad.next(t, 5*time.Second)
	sid, _ := initialize(t, o.MCP, "2025-11-25")
	legacyPost(t, o.MCP, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if r := legacyPost(t, o.MCP, sid, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"a+test://pub/2"}}`); r.Error != nil {
		t.Fatalf("subscribe: %s", r.Body)
	}
	legacyPost(t, o.MCP, sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	openSessionStream(t, o.MCP, sid)

	fams := scrapeFamilies(t, o.Admin+"/metrics")
	for _, w := range []struct{ method, code string }{
		{"subscriptions/listen", "ok"},
		{"subscriptions/listen", "-32602"},
		{"resources/subscribe", "ok"},
		{"ping", "ok"},
	} {
		if v, ok := sample(fams, "manifold_requests_total", "endpoint", "/mcp", "method", w.method, "code", w.code); !ok || v != 1 {
			t.Errorf("manifold_requests_total{method=%q,code=%q} = %v (present %v), want 1", w.method, w.code, v, ok)
		}
	}
	if v, _ := sample(fams, "manifold_request_duration_seconds", "endpoint", "/mcp", "method", "resources/subscribe"); v != 1 {
		t.Errorf("resources/subscribe has %v durations, want 1", v)
	}
	eventually(t, 10*time.Second, func() error {
		if v, _ := sample(scrapeFamilies(t, o.Admin+"/metrics"), "manifold_subscriptions_open"); v != 2 {
			return fmt.Errorf("manifold_subscriptions_open = %v with a listen and a session's stream open", v)
		}
		return nil
	})
}

// The metrics table of docs/operations.md lists every family a process exports (with
// Redis, rate limits and an audit log, so that the families of each are
// there), and nothing it does not.
func TestMetricsTableListsEveryFamily(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(manifold_[a-z_]+)` \\|").FindAllSubmatch(page, -1) {
		documented[string(m[1])] = true
	}
	rs := redistest.Start(t)
	h := sleepyServer()
	up := modernSDK(t, h.Server)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	o := startOps(t, fmt.Sprintf("cache: {secret: metrics-secret-0123456789, redis: {url: %q}}\naudit: {file: %q}\nlimits: {per_principal: {rate: 1, burst: 1}}\nupstreams:", rs.URL(), audit)+
		httpUpstreamYAML("a", up.URL))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	for i := 0; i < 3; i++ { // the second and third are refused by the limit
		post(t, o.MCP, headers("resources/read", "a+test://pub/1"), rpcBody(1, "resources/read", `"uri":"a+test://pub/1"`))
	}
	exported := map[string]bool{}
	for name := range scrapeFamilies(t, o.Admin+"/metrics") {
		if strings.HasPrefix(name, "manifold_") {
			exported[name] = true
		}
	}
	if !exported["manifold_rate_limited_total"] || !exported["manifold_cache_redis_errors_total"] || !exported["manifold_audit_dropped_total"] {
		t.Fatalf("the configuration did not bring every family out: %v", keys(exported))
	}
	for name := range exported {
		if !documented[name] {
			t.Errorf("%s is exported but not in the metrics table of docs/operations.md", name)
		}
	}
	for name := range documented {
		if !exported[name] {
			t.Errorf("the metrics table of docs/operations.md lists %s, which the process does not export", name)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
