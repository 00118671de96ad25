package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The MCP authorization spec wants the protected resource metadata to name
// at least one authorization server: without authorization_servers it is
// the JWT issuer.
func TestMetadataNamesTheIssuerByDefault(t *testing.T) {
	is := newIssuer(t)
	_, _, p := hintedProxy(t, fmt.Sprintf("auth:\n  jwt: {issuer: %q, audiences: [%q], jwks_url: %q}\n", is.URL, testAudience, is.JWKS))
	r := do(t, http.MethodGet, strings.TrimSuffix(p.URL, "/mcp")+"/.well-known/oauth-protected-resource/mcp", http.Header{}, "")
	var doc struct {
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.Unmarshal(r.Body, &doc); err != nil || r.Status != 200 {
		t.Fatalf("metadata: HTTP %d %s", r.Status, r.Body)
	}
	if len(doc.AuthorizationServers) != 1 || doc.AuthorizationServers[0] != is.URL {
		t.Errorf("metadata %s: want authorization_servers [%q]", r.Body, is.URL)
	}
}

// manifold validate accepts static tokens alone, which no authorization
// server issues (no metadata is published then: TestStaticTokensAlone);
// with auth.jwt the issuer stands in for authorization_servers, and one
// that is not an https URL is reported at its YAML path.
func TestCLIValidateAuthorizationServers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, auth string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(auth+"upstreams: [{name: a, url: \"http://127.0.0.1:1/mcp\"}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	static := write("static.yaml", "auth: {bearer_tokens: [static-token-0123456789]}\n")
	if out, errOut, code := runCLI(t, "", "validate", "--config", static); code != 0 {
		t.Errorf("static tokens without authorization_servers: exit %d, %s%s", code, out, errOut)
	}
	named := write("named.yaml", "auth: {bearer_tokens: [static-token-0123456789], authorization_servers: [\"https://idp.example.com\"]}\n")
	if out, errOut, code := runCLI(t, "", "validate", "--config", named); code != 0 {
		t.Errorf("static tokens with authorization_servers: exit %d, %s%s", code, out, errOut)
	}
	jwt := write("jwt.yaml", "auth: {jwt: {issuer: \"https://idp.example.com\", audiences: [x], jwks_url: \"https://idp.example.com/jwks\"}}\n")
	if out, errOut, code := runCLI(t, "", "validate", "--config", jwt); code != 0 {
		t.Errorf("auth.jwt without authorization_servers: exit %d, %s%s", code, out, errOut)
	}
	odd := write("odd.yaml", "auth: {jwt: {issuer: my-idp, audiences: [x], jwks_url: \"https://idp.example.com/jwks\"}}\n")
	if _, errOut, code := runCLI(t, "", "validate", "--config", odd); code != 1 || !strings.Contains(errOut, "auth.authorization_servers:") {
		t.Errorf("auth.jwt whose issuer is no URL, without authorization_servers: exit %d, %q", code, errOut)
	}
}

// Static tokens alone (API keys an operator hands out, no authorization
// server) start a real process: a request with the token is served, one
// without is 401 with a challenge that names no metadata document, and no
// protected resource metadata is published (404), since a document naming
// no authorization server, or a made-up one, would send an MCP client into
// an OAuth discovery that cannot end in a token.
func TestStaticTokensAlone(t *testing.T) {
	up := modernSDK(t, newSDKServer("a", sdkOptions{resources: 1}))
	const tok = "static-token-0123456789"
	o := startOps(t, fmt.Sprintf("auth: {bearer_tokens: [%q]}\nupstreams:", tok)+httpUpstreamYAML("a", up.URL))
	read := func(auth string) *rawResponse {
		h := headers("resources/read", "a+test://a/0")
		if auth != "" {
			h.Set("Authorization", auth)
		}
		return post(t, o.MCP, h, rpcBody(1, "resources/read", `"uri":"a+test://a/0"`))
	}
	var rr readResult
	read("Bearer "+tok).result(t, &rr)
	if len(rr.Contents) != 1 || rr.Contents[0].Text != "a resource 0" {
		t.Errorf("read with the token: %+v", rr)
	}
	for auth, want := range map[string]string{"": "Bearer", "Bearer wrong-token-0123456789": `Bearer error="invalid_token"`} {
		if c := challengeOf(t, read(auth), "token "+auth); c != want {
			t.Errorf("token %q: WWW-Authenticate %q, want %q", auth, c, want)
		}
	}
	base := strings.TrimSuffix(o.MCP, "/mcp")
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		if code, body := fetch(t, http.MethodGet, base+path, nil); code != http.StatusNotFound {
			t.Errorf("GET %s: HTTP %d %s, want 404", path, code, body)
		}
	}
}
