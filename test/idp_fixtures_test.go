package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// idp is panva's oidc-provider (test/ts/oidc-provider.mjs), a real,
// independently written authorization server, in front of a go-sdk MCP
// server it protects (the crm of the OAuth tests: its tool whoami answers
// with the subject of the JWT access token it was called with).
type idp struct {
	Issuer string
	MCP    string // the protected MCP server's URL, the tokens' resource
}

// idpStats is what the authorization server saw.
type idpStats struct {
	Authorizations int `json:"authorizations"`
	Refreshes      int `json:"refreshes"`
	Reused         int `json:"reused"`  // spent refresh tokens presented again
	Revoked        int `json:"revoked"` // grants revoked (oidc-provider revokes on reuse)
}

// startIdP runs the authorization server, its access tokens living
// accessTTL, and the MCP server it protects; both stop with the test.
func startIdP(t *testing.T, accessTTL time.Duration) *idp {
	t.Helper()
	node := nodeOrSkip(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &idp{MCP: "http://" + l.Addr().String() + "/mcp"}
	cmd := exec.Command(node, tsScript(t, "oidc-provider.mjs"))
	cmd.Env = append(os.Environ(), "RESOURCE="+p.MCP, fmt.Sprintf("ACCESS_TTL=%d", int(accessTTL.Seconds())))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p.Issuer = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("oidc-provider did not start within 30 s")
	}
	srv := &http.Server{Handler: p.protected(t), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// protected serves whoami to a request bearing an access token the
// authorization server signed for this resource, and answers any other
// with the RFC 9728 challenge; its resource metadata names the server.
func (p *idp) protected(t *testing.T) http.Handler {
	keys, err := jwk.Fetch(context.Background(), p.Issuer+"/jwks")
	if err != nil {
		t.Fatal(err)
	}
	origin := strings.TrimSuffix(p.MCP, "/mcp")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"resource": p.MCP, "authorization_servers": []string{p.Issuer}, "scopes_supported": []string{"crm:read"}})
	})
	mcpServer := modernHandler(whoamiServer())
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		tok, err := jwt.ParseString(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), jwt.WithKeySet(keys),
			jwt.WithIssuer(p.Issuer), jwt.WithAudience(p.MCP), jwt.WithValidate(true))
		sub, ok := "", false
		if err == nil {
			sub, ok = tok.Subject()
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="invalid_token", resource_metadata="%s/.well-known/oauth-protected-resource/mcp"`, origin))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		r.Header.Set("X-Token-User", sub)
		mcpServer.ServeHTTP(w, r)
	})
	return mux
}

// stats asks the authorization server what it saw.
func (p *idp) stats(t *testing.T) idpStats {
	t.Helper()
	resp, err := http.Get(p.Issuer + "/test/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s idpStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// consentAt is user's browser at the authorization server: it opens the
// consent link and follows every redirect (logging in and consenting as
// user on the way) to Manifold's callback, whose status and page it
// returns.
func consentAt(t *testing.T, link, user string) (int, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	// Manifold's page first, then its button: a POST of the state.
	if status, page := get(t, link); status != http.StatusOK {
		return status, page
	}
	form := url.Values{"state": {stateOf(t, link)}}.Encode()
	req, _ := http.NewRequest(http.MethodPost, link, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Test-User", user)
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
