package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
)

// challengeOf asserts a 401 and returns its WWW-Authenticate value.
func challengeOf(t *testing.T, r *rawResponse, what string) string {
	t.Helper()
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("%s: HTTP %d %s, want 401", what, r.Status, r.Body)
	}
	if r.Error == nil || r.Error.Code != -32600 {
		t.Errorf("%s: body %s, want a JSON-RPC error -32600", what, r.Body)
	}
	return r.Header.Get("WWW-Authenticate")
}

// Tokens signed by the issuer's RSA, EC and Ed25519 keys are admitted; an
// expired, not yet valid, wrong-audience, audience-less, wrong-issuer,
// unsigned, HMAC-forged or exp-less token is refused with 401, a challenge
// naming the metadata and error="invalid_token", and never reaches the
// upstream. A request with no token gets the challenge without an error
// code.
func TestJWTValidation(t *testing.T) {
	is := newIssuer(t)
	h, _, p := hintedProxy(t, is.authYAML(""))
	base := strings.TrimSuffix(p.URL, "/mcp")
	wantMeta := `Bearer resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp"`
	send := func(tok string) *rawResponse {
		hd := headers("resources/read", "h+test://pub/jwt")
		if tok != "" {
			hd.Set("Authorization", "Bearer "+tok)
		}
		return post(t, p.URL, hd, rpcBody(1, "resources/read", `"uri":"h+test://pub/jwt"`))
	}
	for _, kid := range []string{"rsa-1", "ec-1", "ed-1"} {
		if r := send(is.mint(kid, claims{"sub": "alice"})); r.Status != 200 || r.Error != nil {
			t.Errorf("%s-signed token: HTTP %d %s", kid, r.Status, r.Body)
		}
	}
	// Inside the default 30s leeway an expired token still passes.
	if r := send(is.mint("rsa-1", claims{"sub": "alice", "exp": time.Now().Add(-10 * time.Second)})); r.Status != 200 {
		t.Errorf("token expired 10s ago (leeway 30s): HTTP %d", r.Status)
	}
	calls := h.count("test://pub/jwt")
	bad := map[string]string{
		"expired":       is.mint("rsa-1", claims{"sub": "alice", "exp": time.Now().Add(-time.Hour)}),
		"not yet":       is.mint("ec-1", claims{"sub": "alice", "nbf": time.Now().Add(time.Hour)}),
		"audience":      is.mint("rsa-1", claims{"sub": "alice", "aud": []string{"https://other.example/mcp"}}),
		"no audience":   is.mint("rsa-1", claims{"sub": "alice", "aud": nil}),
		"issuer":        is.mint("ed-1", claims{"sub": "alice", "iss": "https://evil.example"}),
		"no exp":        is.mint("rsa-1", claims{"sub": "alice", "exp": nil}),
		"no sub":        is.mint("rsa-1", claims{}),
		"alg none":      is.forge("none", nil),
		"HMAC-confused": is.forge("HS256", nil),
		"garbage":       "not-a-jwt",
		"tampered":      tamper(is.mint("rsa-1", claims{"sub": "alice"})),
	}
	for name, tok := range bad {
		c := challengeOf(t, send(tok), name)
		if c != wantMeta+`, error="invalid_token"` {
			t.Errorf("%s: WWW-Authenticate %q", name, c)
		}
	}
	if c := challengeOf(t, send(""), "no token"); c != wantMeta {
		t.Errorf("no token: WWW-Authenticate %q, want %q", c, wantMeta)
	}
	if n := h.count("test://pub/jwt"); n != calls {
		t.Errorf("refused callers reached the upstream: %d calls, want %d", n, calls)
	}
}

// tamper changes the subject of a signed token, keeping its signature.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	body, _ := decodeSegment(parts[1])
	var c map[string]any
	_ = json.Unmarshal(body, &c)
	c["sub"] = "mallory"
	b, _ := json.Marshal(c)
	parts[1] = encodeSegment(b)
	return strings.Join(parts, ".")
}

// The issuer rotates in a key Manifold has not seen: a token naming it
// makes Manifold fetch the key set again (at most once every 2s however
// many unknown key ids arrive), after which the token is admitted.
func TestJWKSRotation(t *testing.T) {
	is := newIssuer(t)
	_, _, p := hintedProxy(t, is.authYAML(""))
	send := func(tok string) int {
		hd := headers("resources/read", "h+test://pub/rot")
		hd.Set("Authorization", "Bearer "+tok)
		return post(t, p.URL, hd, rpcBody(1, "resources/read", `"uri":"h+test://pub/rot"`)).Status
	}
	if s := send(is.mint("rsa-1", claims{"sub": "alice"})); s != 200 {
		t.Fatalf("first token: HTTP %d", s)
	}
	publish := is.addUnpublished("rsa-2", jwa.RS256(), mustRSA(t))
	before := is.fetches.Load()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s := send(is.mint("rsa-2", claims{"sub": "alice"})); s != 401 {
				t.Errorf("token of an unpublished key: HTTP %d", s)
			}
		}()
	}
	wg.Wait()
	if n := is.fetches.Load() - before; n > 1 {
		t.Errorf("50 tokens with an unknown key cost %d key-set fetches, want at most 1", n)
	}
	publish()
	// Admitted once the 2 s between fetches has passed (counted by the
	// process's clock); asking meanwhile costs no extra fetch.
	eventually(t, 10*time.Second, func() error {
		if s := send(is.mint("rsa-2", claims{"sub": "alice"})); s != 200 {
			return fmt.Errorf("token of the rotated-in key, after it was published: HTTP %d", s)
		}
		return nil
	})
	if n := is.fetches.Load() - before; n > 2 {
		t.Errorf("a rotation cost %d key-set fetches, want at most 2 (one per 2 s)", n)
	}
}

// The protected resource metadata (RFC 9728) is served, without a token, at
// the root well-known URL and at the path-aware one the challenge names:
// the resource, the authorization servers and the scopes of the
// configuration. With auth.resource set, both the document and the
// challenge follow it; with authentication off there is none.
func TestProtectedResourceMetadata(t *testing.T) {
	is := newIssuer(t)
	_, _, p := hintedProxy(t, is.authYAML(""))
	base := strings.TrimSuffix(p.URL, "/mcp")
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		r := do(t, http.MethodGet, base+path, http.Header{}, "")
		var doc struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}
		if err := json.Unmarshal(r.Body, &doc); r.Status != 200 || err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: HTTP %d %s %v", path, r.Status, r.Body, err)
		}
		if doc.Resource != p.URL || len(doc.AuthorizationServers) != 1 || doc.AuthorizationServers[0] != is.URL || len(doc.ScopesSupported) != 1 || doc.ScopesSupported[0] != "mcp" {
			t.Errorf("%s: %s", path, r.Body)
		}
	}
	_, _, fixed := hintedProxy(t, is.authYAML("  resource: https://mcp.example.com/mcp\n"))
	fb := strings.TrimSuffix(fixed.URL, "/mcp")
	r := do(t, http.MethodGet, fb+"/.well-known/oauth-protected-resource", http.Header{}, "")
	if !strings.Contains(string(r.Body), `"resource":"https://mcp.example.com/mcp"`) {
		t.Errorf("configured resource: %s", r.Body)
	}
	c := challengeOf(t, post(t, fixed.URL, headers("ping", ""), rpcBody(1, "ping", "")), "configured resource")
	if c != `Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"` {
		t.Errorf("challenge %q", c)
	}
	_, _, open := hintedProxy(t, "")
	resp, err := http.Get(strings.TrimSuffix(open.URL, "/mcp") + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("metadata without authentication: HTTP %d", resp.StatusCode)
	}
}

// A static token may be configured as its SHA-256 digest: the token is
// admitted, the digest presented as a token is not.
func TestStaticTokenAsDigest(t *testing.T) {
	const tok = "static-token-0123456789abcdef"
	sum := sha256.Sum256([]byte(tok))
	digest := hex.EncodeToString(sum[:])
	_, _, p := hintedProxy(t, fmt.Sprintf("auth: {bearer_tokens: [\"sha256:%s\"], authorization_servers: [\"https://idp.example.com\"]}\n", digest))
	if text, _, _ := readAs(t, p.URL, "h+test://pub/static", tok); text == "" {
		t.Error("the token of a configured digest was not admitted")
	}
	for _, bad := range []string{digest, "sha256:" + digest} {
		hd := headers("ping", "")
		hd.Set("Authorization", "Bearer "+bad)
		if c := challengeOf(t, post(t, p.URL, hd, rpcBody(1, "ping", "")), "the digest as a token"); !strings.Contains(c, `error="invalid_token"`) {
			t.Errorf("challenge %q", c)
		}
	}
}

// Private entries are keyed by the JWT principal where the upstream answers
// per principal: two tokens of one principal (a refresh) share one entry,
// across replicas too; two principals, or one subject in two tenants
// (a principal claim), never do. An upstream forwarded the caller's token
// keeps per-token entries unless its cache_key says principal.
func TestPrincipalKeyedPrivateCache(t *testing.T) {
	is := newIssuer(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	alice1 := is.mint("rsa-1", claims{"sub": "alice", "tenant": "a", "jti": "1"})
	alice2 := is.mint("ec-1", claims{"sub": "alice", "tenant": "a", "jti": "2"})
	aliceB := is.mint("rsa-1", claims{"sub": "alice", "tenant": "b"})
	bob := is.mint("ed-1", claims{"sub": "bob", "tenant": "a"})
	authYAML := is.authYAML("  principal_claims: [tenant]\n")
	cases := []struct {
		name, upstreamYAML string
		wantCalls          int // for alice1, alice2, aliceB, bob, alice1 again
	}{
		{"not forwarded", httpUpstreamYAML("h", up.URL), 3},
		{"forwarded, per credential", httpUpstreamYAML("h", up.URL, "forward_headers: [Authorization]"), 4},
		{"forwarded, cache_key principal", httpUpstreamYAML("h", up.URL, "forward_headers: [Authorization]", "cache_key: principal"), 3},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			uri := fmt.Sprintf("h+test://priv/principal-%d", i)
			p := startProxy(t, authYAML+"upstreams:"+c.upstreamYAML)
			for _, tok := range []string{alice1, alice2, aliceB, bob, alice1} {
				if _, _, scope := readAs(t, p.URL, uri, tok); scope != "private" {
					t.Fatalf("scope %q", scope)
				}
			}
			if n := h.count(strings.TrimPrefix(uri, "h+")); n != c.wantCalls {
				t.Errorf("upstream calls %d, want %d", n, c.wantCalls)
			}
		})
	}
}

// A legacy session belongs to the principal that opened it: another
// principal naming its id gets 404 (as for an unknown session), on POST,
// GET and DELETE, and the session lives on; the same principal with a
// refreshed token goes on using it.
func TestSessionBoundToPrincipal(t *testing.T) {
	is := newIssuer(t)
	_, _, p := hintedProxy(t, is.authYAML(""))
	as := func(tok string) http.Header {
		return http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + tok}}
	}
	alice, alice2, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("ec-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	r := post(t, p.URL, as(alice), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Status != 200 || sid == "" {
		t.Fatalf("initialize: HTTP %d %s", r.Status, r.Body)
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	on := func(h http.Header) http.Header {
		h.Set("Mcp-Session-Id", sid)
		h.Set("MCP-Protocol-Version", "2025-11-25")
		return h
	}
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		if s := rawStatus(t, m, p.URL, on(as(bob)), ping); s != http.StatusNotFound {
			t.Errorf("bob %s on alice's session: HTTP %d, want 404", m, s)
		}
	}
	if r := post(t, p.URL, on(as(alice2)), ping); r.Status != 200 || r.Error != nil {
		t.Errorf("alice with a refreshed token: HTTP %d %s", r.Status, r.Body)
	}
}

// rawStatus sends one request and returns its status, whatever the body.
func rawStatus(t *testing.T, method, url string, h http.Header, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The TypeScript SDK v1 client, with its client-credentials provider and no
// token, connects to a Manifold that requires one: from the 401 it reads
// the protected resource metadata, asks the authorization server named
// there for a token for this resource, and reads through Manifold with it.
func TestTypeScriptClientDiscoversAuth(t *testing.T) {
	node := nodeOrSkip(t)
	script := tsScript(t, "auth-client.mjs")
	is := newIssuer(t)
	_, _, p := hintedProxy(t, is.authYAML(""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, p.URL, is.URL)
	cmd.Stderr = testWriter{t}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	steps := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var l struct {
			Step  string          `json:"step"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			t.Fatalf("client said %q", line)
		}
		steps[l.Step] = string(l.Value)
	}
	wantMeta := fmt.Sprintf(`"resource":%q`, p.URL)
	if !strings.Contains(steps["metadata"], wantMeta) || !strings.Contains(steps["metadata"], is.URL) {
		t.Errorf("metadata as the SDK read it: %s", steps["metadata"])
	}
	for step, want := range map[string]string{"version": `"manifold"`, "token": `"Bearer"`, "read": `"with a bearer token"`} {
		if steps[step] != want {
			t.Errorf("%s: %s, want %s", step, steps[step], want)
		}
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if len(is.resources) != 1 || is.resources[0] != p.URL {
		t.Errorf("token requests asked for resources %q, want [%q]", is.resources, p.URL)
	}
}

// A listen stream lasts no longer than the JWT it was opened with (and
// the leeway): when the token expires, the stream ends with its result,
// and the caller listens again with a fresh token, whose claims the
// access rules then read anew.
func TestListenEndsWhenTheTokenExpires(t *testing.T) {
	is := newIssuer(t)
	up := serveHTTP(t, modernHandler(sdkToolServer("docs", sdkOptions{resources: 1})))
	auth := fmt.Sprintf("auth:\n  jwt: {issuer: %q, audiences: [%q], jwks_url: %q, leeway: 1s}\n", is.URL, testAudience, is.JWKS)
	p := startProxy(t, auth+"upstreams:"+httpUpstreamYAML("docs", up.URL))
	tok := is.mint("rsa-1", claims{"sub": "alice", "exp": time.Now().Add(2 * time.Second)})
	st := listen(t, p.URL, 1, `{"resourcesListChanged":true}`, "Authorization", "Bearer "+tok)
	if st.Status != http.StatusOK {
		t.Fatalf("listen: HTTP %d", st.Status)
	}
	deadline := time.Now().Add(10 * time.Second) // its exp, 2 s, and the leeway, 1 s
	for {
		m := st.next(t, time.Until(deadline))
		if _, ended := m["result"]; ended {
			return
		}
	}
}
