package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// readyzBody is /readyz's JSON.
type readyzBody struct {
	Ready     bool `json:"ready"`
	Upstreams map[string]struct {
		State     string `json:"state"`
		Protocol  string `json:"protocol"`
		Transport string `json:"transport"`
	} `json:"upstreams"`
}

func (o *opsProcess) readyz(t *testing.T) (int, readyzBody) {
	t.Helper()
	code, body := o.get(t, "/readyz")
	var r readyzBody
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	return code, r
}

// waitReady waits until /readyz answers code with the upstream states
// wanted (name → state).
func (o *opsProcess) waitReady(t *testing.T, code int, states map[string]string) readyzBody {
	t.Helper()
	var last readyzBody
	eventually(t, 30*time.Second, func() error {
		c, r := o.readyz(t)
		last = r
		if c != code {
			return fmt.Errorf("/readyz %d, want %d: %+v", c, code, r)
		}
		for name, st := range states {
			if r.Upstreams[name].State != st {
				return fmt.Errorf("upstream %s %q, want %q", name, r.Upstreams[name].State, st)
			}
		}
		return nil
	})
	return last
}

// Readiness through a fault sequence on a real process: an optional
// upstream that never answers leaves the replica ready; the required one
// going down makes it unready (503, logged), merged lists still answer,
// and its return makes it ready again; liveness says ok throughout.
func TestReadiness(t *testing.T) {
	h := newHintedServer()
	a := newSwitchable(t, modernHandler(h.Server))
	dead := fmt.Sprintf("http://127.0.0.1:%d/mcp", freePort(t))
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", a.URL(), "required: true")+httpUpstreamYAML("b", dead, "timeout: 2s"))

	r := o.waitReady(t, http.StatusOK, map[string]string{"a": "ready", "b": "down"})
	if u := r.Upstreams["a"]; u.Protocol != "2026-07-28" || u.Transport != "http" {
		t.Errorf("upstream a in /readyz: %+v", u)
	}
	for round := 1; round <= 2; round++ {
		a.down()
		o.waitReady(t, http.StatusServiceUnavailable, map[string]string{"a": "down"})
		if code, body := o.get(t, "/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("liveness while unready: %d %q", code, body)
		}
		list := post(t, o.MCP, headers("resources/list", ""), rpcBody(1, "resources/list", ""))
		if list.Status != http.StatusOK || list.Error != nil {
			t.Errorf("round %d: a merged list with every upstream down: %d %s", round, list.Status, list.Body)
		}
		a.up()
		o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	}
	if n := o.logCount("manifold not ready", "a=down"); n != 2 {
		t.Errorf("%d log lines saying the replica is not ready because of a, want 2:\n%s", n, o.Logs.String())
	}
}

// With admin.listen the operational endpoints move there, open; on the
// main listener they are gone and /mcp still requires the token.
// Without it they stay on the main listener, metrics and the page behind
// the token.
func TestAdminListener(t *testing.T) {
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	token := "ops-token-0123456789abcdef"
	o := startOps(t, fmt.Sprintf("auth: {bearer_tokens: [%s], authorization_servers: [\"https://idp.example.com\"]}\nupstreams:", token)+httpUpstreamYAML("a", up.URL))
	base := strings.TrimSuffix(o.MCP, "/mcp")
	o.waitReady(t, http.StatusOK, nil)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/ui", "/ui/state", "/debug/pprof/"} {
		if code, _ := o.get(t, path); code != http.StatusOK {
			t.Errorf("admin %s: %d without credentials", path, code)
		}
		if code, _ := fetch(t, http.MethodGet, base+path, nil); code != http.StatusNotFound {
			t.Errorf("main listener %s: %d, want 404", path, code)
		}
	}
	if code, _ := fetch(t, http.MethodPost, base+"/reload", nil); code != http.StatusNotFound {
		t.Errorf("main listener /reload: %d, want 404", code)
	}
	// A web page cannot reload through the operator's browser.
	if code, _ := fetch(t, http.MethodPost, o.Admin+"/reload", http.Header{"Origin": {"https://evil.example"}}); code != http.StatusForbidden {
		t.Errorf("cross-origin POST /reload: %d, want 403", code)
	}

	p := startProxy(t, fmt.Sprintf("auth: {bearer_tokens: [%s], authorization_servers: [\"https://idp.example.com\"]}\nupstreams:", token)+httpUpstreamYAML("a", up.URL))
	main := strings.TrimSuffix(p.URL, "/mcp")
	bearer := http.Header{"Authorization": {"Bearer " + token}}
	eventually(t, 10*time.Second, func() error {
		if code, body := fetch(t, http.MethodGet, main+"/readyz", nil); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %s", code, body)
		}
		return nil
	})
	for path, open := range map[string]bool{"/healthz": true, "/readyz": true, "/metrics": false, "/ui": false, "/ui/state": false} {
		code, _ := fetch(t, http.MethodGet, main+path, nil)
		if open && code != http.StatusOK || !open && code != http.StatusUnauthorized {
			t.Errorf("main listener without admin: %s without token: %d", path, code)
		}
		if code, _ := fetch(t, http.MethodGet, main+path, bearer); code != http.StatusOK {
			t.Errorf("main listener without admin: %s with token: %d", path, code)
		}
	}
	// A page that DNS-rebinds its name to this listener, or calls it from
	// another site, is refused as on /mcp.
	for _, h := range []http.Header{{"Origin": {"https://evil.example"}}, {"Host": {"evil.example"}}} {
		for k, v := range bearer {
			h[k] = v
		}
		if code, _ := fetch(t, http.MethodGet, main+"/ui/state", h); code != http.StatusForbidden {
			t.Errorf("main listener /ui/state with %v: %d, want 403", h, code)
		}
	}
	for _, path := range []string{"/reload", "/debug/pprof/"} {
		if code, _ := fetch(t, http.MethodGet, main+path, bearer); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
			t.Errorf("main listener without admin: %s: %d, want it absent", path, code)
		}
	}
}

// scrapeFamilies parses /metrics with Prometheus's own parser.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// sample returns the value of the family's sample with exactly labels
// (name=value pairs), and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		match := len(got) == len(labels)/2
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && got[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// counted sums the samples of family name whose labels include labels
// (name=value pairs) in a /metrics text, parsed as Prometheus parses it:
// what a test compares is the count, not how the line is written.
func counted(t testing.TB, text, name string, labels ...string) float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	total := 0.0
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && got[labels[i]] == labels[i+1]
		}
		if match {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// After traffic, /metrics holds the Go and process collectors, requests by
// method and outcome, latency histograms downstream and per upstream, each
// upstream's up, open sessions and subscriptions, and the cache counters
// under their names of before; no label carries a URI or a credential.
func TestMetricsAfterTraffic(t *testing.T) {
	h := sleepyServer()
	up := modernSDK(t, h.Server)
	dead := fmt.Sprintf("http://127.0.0.1:%d/mcp", freePort(t))
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", up.URL, "forward_headers: [Authorization]")+httpUpstreamYAML("b", dead, "timeout: 2s"))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready", "b": "down"})
	for i := 0; i < 3; i++ {
		readAs(t, o.MCP, "a+test://pub/1", "secret-credential-value")
	}
	post(t, o.MCP, headers("resources/read", "zz+test://x"), rpcBody(2, "resources/read", `"uri":"zz+test://x"`)).wantError(t, 400, -32602)
	callTool(t, o.MCP, "a_sleep", `{"ms":1}`)
	st := listen(t, o.MCP, 7, `{"resourceSubscriptions":["a+test://pub/1"]}`)
	st.next(t, 5*time.Second)
	fams := scrapeFamilies(t, o.Admin+"/metrics")

	want := []struct {
		name   string
		labels []string
		min    float64
	}{
		{"go_goroutines", nil, 1},
		{"process_resident_memory_bytes", nil, 1},
		{"manifold_requests_total", []string{"endpoint", "/mcp", "method", "resources/read", "code", "ok"}, 3},
		{"manifold_requests_total", []string{"endpoint", "/mcp", "method", "resources/read", "code", "-32602"}, 1},
		{"manifold_requests_total", []string{"endpoint", "/mcp", "method", "tools/call", "code", "ok"}, 1},
		{"manifold_request_duration_seconds", []string{"endpoint", "/mcp", "method", "resources/read"}, 4},
		{"manifold_upstream_request_duration_seconds", []string{"upstream", "a", "method", "resources/read"}, 1},
		{"manifold_upstream_request_duration_seconds", []string{"upstream", "a", "method", "tools/call"}, 1},
		{"manifold_upstream_up", []string{"upstream", "a"}, 1},
		{"manifold_subscriptions_open", nil, 1},
		{"manifold_cache_hits_total", []string{"upstream", "a", "tier", "memory"}, 2},
		{"manifold_cache_misses_total", []string{"upstream", "a"}, 1},
		{"manifold_cache_fills_total", []string{"upstream", "a"}, 1},
	}
	for _, w := range want {
		if v, ok := sample(fams, w.name, w.labels...); !ok || v < w.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", w.name, w.labels, v, ok, w.min)
		}
	}
	if v, ok := sample(fams, "manifold_upstream_up", "upstream", "b"); !ok || v != 0 {
		t.Errorf("manifold_upstream_up{upstream=b} = %v (present %v), want 0", v, ok)
	}
	for _, name := range []string{"manifold_sessions_open", "manifold_config_reloads_total", "manifold_cache_stale_served_total", "manifold_cache_evictions_total"} {
		if fams[name] == nil {
			t.Errorf("no %s family", name)
		}
	}
	_, body := o.get(t, "/metrics")
	for _, leak := range []string{"test://", "secret-credential-value", "zz+"} {
		if strings.Contains(body, leak) {
			t.Errorf("/metrics carries %q", leak)
		}
	}
}

// Error codes an upstream makes up do not become label values one by one:
// 40 tool calls failing with 40 application codes add one code label, not 40.
func TestMetricsCodeLabelsBounded(t *testing.T) {
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Arguments struct {
					Code int `json:"code"`
				} `json:"arguments"`
			} `json:"params"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		meta := `"resultType":"complete","ttlMs":0,"cacheScope":"public"`
		switch m.Method {
		case "server/discover":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},%s}}`, m.ID, meta)
		case "tools/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"fail","inputSchema":{"type":"object"}}],%s}}`, m.ID, meta)
		case "tools/call":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"made up"}}`, m.ID, m.Params.Arguments.Code)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
		}
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("a", up.URL))
	for i := range 40 {
		post(t, p.URL, headers("tools/call", "a_fail"), rpcBody(1, "tools/call", fmt.Sprintf(`"name":"a_fail","arguments":{"code":%d}`, 1000+i)))
	}
	codes := map[string]bool{}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(scrape(t, p.URL)))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams["manifold_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if labels["method"] == "tools/call" && labels["code"] != "ok" { // every method's ok series exists from the start
			codes[labels["code"]] = true
		}
	}
	if len(codes) != 1 {
		t.Errorf("tools/call error codes as labels: %v; want one label for every application code", codes)
	}
}
