package oauth

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A server's DPoP nonce is kept per origin only when it is one (RFC 9449
// syntax, bounded), and the origins kept are bounded: a server cannot
// make Manifold hold what it likes.
func TestDPoPNoncesBounded(t *testing.T) {
	var n nonces
	as, _ := url.Parse("https://as.example/token")
	rs, _ := url.Parse("https://RS.example/mcp")
	for _, bad := range []string{strings.Repeat("n", maxNonceBytes+1), `a"b`, "a b", "a\\b", "é"} {
		if n.learn(as, http.Header{"Dpop-Nonce": {bad}}) || n.get(as) != "" {
			t.Errorf("nonce %.20q kept", bad)
		}
	}
	if !n.learn(as, http.Header{"Dpop-Nonce": {"as-1"}}) || n.learn(as, http.Header{"Dpop-Nonce": {"as-1"}}) {
		t.Error("a new nonce is not new, or the same one is new again")
	}
	n.learn(rs, http.Header{"Dpop-Nonce": {"rs-1"}})
	if n.get(as) != "as-1" || n.get(&url.URL{Scheme: "https", Host: "rs.example", Path: "/other"}) != "rs-1" {
		t.Errorf("per origin: %q, %q", n.get(as), n.get(rs))
	}
	for i := range 3 * maxNonces {
		n.learn(&url.URL{Scheme: "https", Host: fmt.Sprintf("h%d.example", i)}, http.Header{"Dpop-Nonce": {"x"}})
		if len(n.m) > maxNonces {
			t.Fatalf("%d origins kept", len(n.m))
		}
	}
}
