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

// manifold validate refuses a configuration whose metadata would name no
// authorization server (static tokens, no authorization_servers), at its
// YAML path; with auth.jwt the issuer stands in, and one that is not an
// https URL is reported too.
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
	_, errOut, code := runCLI(t, "", "validate", "--config", static)
	if code != 1 || !strings.Contains(errOut, "auth.authorization_servers: must name at least one authorization server") {
		t.Errorf("static tokens without authorization_servers: exit %d, %q", code, errOut)
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
