package test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// readStatus reads uri as the holder of tok and returns the response.
func readWith(t *testing.T, url, uri, tok string) *rawResponse {
	t.Helper()
	h := headers("resources/read", uri)
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	return post(t, url, h, rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
}

// wantLimited asserts the wire of a refusal: 429, Retry-After in whole
// seconds, and JSON-RPC error -32000 with data.retryAfterMs.
func wantLimited(t *testing.T, r *rawResponse, what string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("%s: HTTP %d %s, want 429", what, r.Status, r.Body)
	}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("%s: Retry-After %q", what, r.Header.Get("Retry-After"))
	}
	if r.Error == nil || r.Error.Code != -32000 || !strings.Contains(string(r.Body), `"retryAfterMs":`) {
		t.Errorf("%s: body %s", what, r.Body)
	}
}

// Each principal has its own bucket, which cache hits drain too: past the
// burst, 429; another principal is served meanwhile. The refusals are
// counted in the metrics, which name no principal.
func TestPerPrincipalLimit(t *testing.T) {
	is := newIssuer(t)
	_, _, p := hintedProxy(t, is.authYAML("")+"limits: {per_principal: {rate: 0.5, burst: 3}}\n")
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	for i := range 3 {
		if r := readWith(t, p.URL, "h+test://pub/limited", alice); r.Status != 200 {
			t.Fatalf("read %d within the burst: HTTP %d", i, r.Status)
		}
	}
	wantLimited(t, readWith(t, p.URL, "h+test://pub/limited", alice), "alice past her burst (cache hits)")
	if r := readWith(t, p.URL, "h+test://pub/limited", bob); r.Status != 200 {
		t.Errorf("bob, while alice is limited: HTTP %d", r.Status)
	}
	metrics := scrapeAs(t, p.URL, bob)
	if counted(t, metrics, "manifold_rate_limited_total", "limit", "principal") != 1 || strings.Contains(metrics, "alice") {
		t.Errorf("metrics:\n%s", grepLines(metrics, "rate_limited"))
	}
}

// Two replicas sharing one Redis share each principal's bucket: a burst of
// 4 spent across both is spent. With Redis gone, each replica limits on
// its own instead of failing the requests.
func TestPerPrincipalLimitAcrossReplicas(t *testing.T) {
	is := newIssuer(t)
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	conf := is.authYAML("") + fmt.Sprintf("limits: {per_principal: {rate: 0.2, burst: 4}}\ncache: {secret: limit-secret-0123456789, redis: {url: %q}}\n", rs.URL()) +
		"upstreams:" + httpUpstreamYAML("h", up.URL)
	a, b := startProxy(t, conf), startProxy(t, conf)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	served := 0
	for i := range 10 {
		p := []*proxy{a, b}[i%2]
		if readWith(t, p.URL, "h+test://pub/shared-limit", alice).Status == 200 {
			served++
		}
	}
	if served != 4 {
		t.Errorf("10 reads alternating over two replicas: %d served, want 4 (one shared burst)", served)
	}
	rs.Stop()
	carol := is.mint("rsa-1", claims{"sub": "carol"})
	for i, p := range []*proxy{a, b, a, b} {
		if r := readWith(t, p.URL, "h+test://pub/shared-limit", carol); r.Status != 200 {
			t.Errorf("read %d with Redis down, within each replica's own burst: HTTP %d %s", i, r.Status, r.Body)
		}
	}
	served = 0
	for range 6 {
		if readWith(t, a.URL, "h+test://pub/shared-limit", carol).Status == 200 {
			served++
		}
	}
	if served != 2 {
		t.Errorf("replica a with Redis down served %d more, want 2 (the rest of its own burst of 4)", served)
	}
}

// An upstream's bucket counts everything served from it, cache hits
// included; another upstream is not affected.
func TestPerUpstreamLimit(t *testing.T) {
	h1, h2 := newHintedServer(), newHintedServer()
	u1, u2 := modernSDK(t, h1.Server), modernSDK(t, h2.Server)
	p := startProxy(t, "limits: {per_upstream: {rate: 0.5, burst: 2}}\nupstreams:"+httpUpstreamYAML("one", u1.URL)+httpUpstreamYAML("two", u2.URL))
	for range 2 {
		if r := readWith(t, p.URL, "one+test://pub/u", ""); r.Status != 200 {
			t.Fatalf("within the burst: HTTP %d", r.Status)
		}
	}
	wantLimited(t, readWith(t, p.URL, "one+test://pub/u", ""), "upstream one past its burst")
	if r := readWith(t, p.URL, "two+test://pub/u", ""); r.Status != 200 {
		t.Errorf("upstream two: HTTP %d", r.Status)
	}
	if h1.count("test://pub/u") != 1 {
		t.Errorf("upstream one was called %d times, want 1 (then cache hits)", h1.count("test://pub/u"))
	}
	if m := scrape(t, p.URL); counted(t, m, "manifold_rate_limited_total", "limit", "upstream", "upstream", "one") != 1 || counted(t, m, "manifold_rate_limited_total", "upstream", "two") != 0 {
		t.Errorf("metrics:\n%s", grepLines(m, "rate_limited"))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// scrapeAs reads /metrics on the main listener with a bearer token.
func scrapeAs(t *testing.T, url, tok string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(url, "/mcp")+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
