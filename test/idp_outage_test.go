package test

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
)

// keysBound is a generous upper bound of how long a request may wait for
// the issuer's keys (Manifold waits 2 s) before it is answered 503.
const keysBound = 6 * time.Second

// wantKeysUnavailable asserts the wire of a request whose token could not
// be checked because the issuer's keys could not be had: 503, a
// Retry-After in whole seconds, a JSON-RPC internal error, and no
// invalid_token challenge (the token is not at fault).
func wantKeysUnavailable(t *testing.T, r *rawResponse, took time.Duration, what string) {
	t.Helper()
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("%s: HTTP %d %s after %v, want 503", what, r.Status, r.Body, took)
	}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("%s: Retry-After %q", what, r.Header.Get("Retry-After"))
	}
	if r.Error == nil || r.Error.Code != -32603 {
		t.Errorf("%s: body %s, want JSON-RPC error -32603", what, r.Body)
	}
	if c := r.Header.Get("WWW-Authenticate"); strings.Contains(c, "invalid_token") {
		t.Errorf("%s: WWW-Authenticate %q calls the token invalid", what, c)
	}
	if took > keysBound {
		t.Errorf("%s: answered after %v, want within %v", what, took, keysBound)
	}
}

// An identity provider whose key set cannot be had is not an invalid
// token. Through a fault sequence of the JWKS (hanging, then down, then
// back): a valid token gets 503 with Retry-After within a bounded wait,
// then 200 once the keys come; with the keys held, an outage does not touch
// tokens of known keys, while a token of a key not yet held gets 503 again,
// and 200 after the JWKS returns. A token of a key the reachable JWKS does
// not have stays 401.
func TestIdentityProviderOutage(t *testing.T) {
	is := newIssuer(t)
	target, _ := url.Parse(is.URL)
	var hang atomic.Bool
	hang.Store(true)
	proxyJWKS := httputil.NewSingleHostReverseProxy(target)
	jwks := newSwitchable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			<-r.Context().Done()
			return
		}
		proxyJWKS.ServeHTTP(w, r)
	}))
	jwksURL := strings.TrimSuffix(jwks.URL(), "/mcp") + "/jwks.json"
	up := modernSDK(t, newHintedServer().Server)
	p := startProxy(t, fmt.Sprintf("auth:\n  jwt: {issuer: %q, audiences: [%q], jwks_url: %q}\n  authorization_servers: [%q]\nupstreams:",
		is.URL, testAudience, jwksURL, is.URL)+httpUpstreamYAML("h", up.URL))
	send := func(tok string) (*rawResponse, time.Duration) {
		hd := headers("resources/read", "h+test://pub/idp")
		hd.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		r := post(t, p.URL, hd, rpcBody(1, "resources/read", `"uri":"h+test://pub/idp"`))
		return r, time.Since(start)
	}
	alice := is.mint("rsa-1", claims{"sub": "alice"})

	r, took := send(alice)
	wantKeysUnavailable(t, r, took, "JWKS hanging")
	jwks.down()
	hang.Store(false)
	r, took = send(alice)
	wantKeysUnavailable(t, r, took, "JWKS down")
	jwks.up()
	eventually(t, 20*time.Second, func() error {
		if r, _ := send(alice); r.Status != http.StatusOK {
			return fmt.Errorf("JWKS back: HTTP %d %s", r.Status, r.Body)
		}
		return nil
	})

	// Within 2 s of a load, a key the set lacks is refused (401) without a
	// new one; past that, the set is asked for again, and cannot be had.
	publish := is.addUnpublished("rsa-2", jwa.RS256(), mustRSA(t))
	jwks.down()
	eventually(t, 10*time.Second, func() error {
		r, took := send(is.mint("rsa-2", claims{"sub": "bob"}))
		if r.Status == http.StatusUnauthorized {
			return fmt.Errorf("a key not held yet, JWKS down: still 401")
		}
		wantKeysUnavailable(t, r, took, "a key not held yet, JWKS down")
		return nil
	})
	if r, _ := send(alice); r.Status != http.StatusOK {
		t.Errorf("a token of a held key, JWKS down: HTTP %d %s", r.Status, r.Body)
	}
	jwks.up()
	publish()
	eventually(t, 20*time.Second, func() error {
		if r, _ := send(is.mint("rsa-2", claims{"sub": "bob"})); r.Status != http.StatusOK {
			return fmt.Errorf("the new key, JWKS back: HTTP %d %s", r.Status, r.Body)
		}
		return nil
	})

	// Until the set has been asked again, and after.
	is.addUnpublished("rsa-3", jwa.RS256(), mustRSA(t))
	fetched := is.fetches.Load()
	eventually(t, 10*time.Second, func() error {
		r, _ := send(is.mint("rsa-3", claims{"sub": "carol"}))
		if c := challengeOf(t, r, "a key the reachable JWKS lacks"); !strings.Contains(c, `error="invalid_token"`) {
			t.Fatalf("a key the reachable JWKS lacks: WWW-Authenticate %q", c)
		}
		if is.fetches.Load() == fetched {
			return fmt.Errorf("the key set was not fetched again")
		}
		return nil
	})
}
