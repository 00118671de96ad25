package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Attacks on the curated endpoints (issue #21): what an adversary or a
// confused user tries against an endpoint's view and its hiding.

// A URI the endpoint's globs leave out stays out in every spelling that
// names the same resource: the read is asked upstream in its normalized
// form (percent-encoded unreserved characters decoded, dot segments
// removed), so the glob must judge the URI in that form too, not only as
// the caller spelt it.
func TestEndpointViewHoldsForEverySpellingOfAURI(t *testing.T) {
	f := newEndpointsFixture(t, "")
	dev := f.base + "/mcp/dev"
	read := func(uri string) *rawResponse {
		return post(t, dev, as(f.dev)("resources/read", uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	}
	denied := read("docs+test://docs/secret")
	if denied.Error == nil || denied.Error.Code != -32602 {
		t.Fatalf("docs+test://docs/secret at /mcp/dev: HTTP %d %s", denied.Status, denied.Body)
	}
	for _, uri := range []string{
		"docs+test://docs/secre%74",
		"docs+test://docs/%73%65%63%72%65%74",
		"docs+test://docs/x/../secre%74",
	} {
		r := read(uri)
		if r.Error == nil || r.Error.Code != denied.Error.Code {
			t.Errorf("read %s at /mcp/dev (the denied docs+test://docs/secret spelt otherwise): HTTP %d %s", uri, r.Status, r.Body)
		}
	}
}

// A subscription to a URI outside the view, spelt otherwise, is not
// honoured either.
func TestEndpointSubscriptionHoldsForEverySpellingOfAURI(t *testing.T) {
	f := newEndpointsFixture(t, "")
	filter := `{"resourceSubscriptions":["docs+test://docs/0","docs+test://docs/secre%74"]}`
	dev := listen(t, f.base+"/mcp/dev", 1, filter, "Authorization", "Bearer "+f.dev)
	ack := fmt.Sprint(dev.next(t, 5*time.Second)["params"])
	if !strings.Contains(ack, "docs+test://docs/0") || strings.Contains(ack, "secre") {
		t.Errorf("/mcp/dev acknowledged %s", ack)
	}
	// The secret's update, then one of docs/0: the first told must be
	// docs/0's.
	updateUpstream(t, f.docs, "test://docs/secret")
	updateUpstream(t, f.docs, "test://docs/0")
	for {
		m := dev.next(t, 10*time.Second)
		params, _ := m["params"].(map[string]any)
		if uri, _ := params["uri"].(string); strings.Contains(uri, "secre") {
			t.Fatalf("/mcp/dev was told of %s", uri)
		} else if uri == "docs+test://docs/0" {
			return
		}
	}
}

// A caller an endpoint does not admit cannot tell it from a path nothing
// is served on by the per-principal rate limit either: requests to a
// path beside it count against the caller's limit and are refused 429
// once it is spent, so the endpoint's own paths must be too, or counting
// 429s finds the endpoint.
func TestEndpointHiddenUnderTheRateLimit(t *testing.T) {
	f := newEndpointsFixture(t, "limits: {per_principal: {rate: 0.001, burst: 2}}\n")
	other := f.is.mint("rsa-1", claims{"sub": "sid", "groups": []string{"sales"}})
	body := rpcBody(1, "tools/list", "")
	for i := range 4 {
		got := rawDo(t, http.MethodPost, f.base+"/mcp/dev", as(f.sale)("tools/list", ""), body)
		nothing := rawDo(t, http.MethodPost, f.base+"/mcp/nothing-here", as(other)("tools/list", ""), body)
		sameBody := got.Status == http.StatusTooManyRequests || string(got.Body) == string(nothing.Body) // a 429 says how long to wait
		if got.Status != nothing.Status || !sameBody || got.Header.Get("Content-Type") != nothing.Header.Get("Content-Type") || (got.Header.Get("Retry-After") == "") != (nothing.Header.Get("Retry-After") == "") {
			t.Errorf("request %d: /mcp/dev answers HTTP %d %q (Retry-After %q); a path nothing is served on, to a caller alike: HTTP %d %q (Retry-After %q)",
				i+1, got.Status, got.Body, got.Header.Get("Retry-After"), nothing.Status, nothing.Body, nothing.Header.Get("Retry-After"))
		}
	}
}
