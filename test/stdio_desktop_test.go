package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// revokeAll revokes every grant p's authorization server has given, as
// its user does from their account's page there.
func (p *idp) revokeAll(t *testing.T) int {
	t.Helper()
	resp, err := http.Post(p.Issuer+"/test/revoke", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ Revoked int }
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Revoked
}

// A desktop user consents through manifold stdio at a real authorization
// server (oidc-provider, which accepts a redirect URI only as registered,
// but any port of a native client's loopback one, RFC 8252 §7.3), quits
// the host, and revokes Manifold's grant at the server. The next start of
// manifold stdio listens on another loopback port, finds the grant
// refused and asks again: that consent, sent back to the new port under
// the registration the state directory kept, succeeds.
func TestStdioOAuthConsentAgainAfterRestart(t *testing.T) {
	const accessTTL = 2 * time.Second
	p := startIdP(t, accessTTL)
	state := t.TempDir()
	cfg := writeConfig(t, fmt.Sprintf("upstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n", p.MCP))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := func() (*desktopHost, string) {
		h := &desktopHost{t: t, cfgPath: cfg, env: []string{"XDG_STATE_HOME=" + state}, user: "alice", consent: consentAt}
		cs := h.connect(ctx, "")
		got, err := whoamiVia(ctx, cs)
		_ = cs.Close() // the host quits: manifold stdio's stdin ends
		if err != nil || got != "you are alice" {
			t.Fatalf("the call through manifold stdio: %q, %v", got, err)
		}
		links := h.asked()
		if len(links) != 1 {
			t.Fatalf("asked %d times: %v", len(links), links)
		}
		u, err := url.Parse(links[0])
		if err != nil {
			t.Fatal(err)
		}
		return h, u.Host
	}
	_, first := start()
	if n := p.revokeAll(t); n == 0 {
		t.Fatal("the authorization server revoked no grant")
	}
	time.Sleep(accessTTL + time.Second) // the access token kept expires: the next call needs the revoked grant
	_, second := start()
	if first == second {
		t.Fatalf("both starts listened on %s: the test shows nothing", first)
	}
	if s := p.stats(t); s.Authorizations != 2 {
		t.Errorf("the authorization server saw %+v; want two consents", s)
	}
}
