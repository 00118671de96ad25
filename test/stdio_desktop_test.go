package test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// A desktop host drives manifold stdio as it drives any server: it lists
// the tools, and is shown crm_connect alone while its user has not
// consented; it calls crm_connect, is asked to open the consent link (URL
// elicitation), whose consent its user gives in the browser; it is then
// told the tool list changed, lists again, is shown crm's real tools in
// place of crm_connect, and calls crm_whoami, which answers as the user.
func TestStdioConnectToolListChanged(t *testing.T) {
	as := newAuthServer(t)
	cfg := writeConfig(t, fmt.Sprintf("upstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n", as.MCP))
	h := &desktopHost{t: t, cfgPath: cfg, env: []string{"XDG_STATE_HOME=" + t.TempDir()}, user: "alice-at-crm", changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := h.connect(ctx, "")

	if before := toolNames(t, ctx, cs); len(before) != 1 || before["crm_connect"] == nil {
		t.Fatalf("before consent, the host is shown %v, want [crm_connect]", slices.Sorted(maps.Keys(before)))
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "crm_connect", Arguments: map[string]any{}})
	if err != nil || res.IsError || len(h.asked()) != 1 {
		t.Fatalf("crm_connect: %v %+v (asked %d times)", err, res, len(h.asked()))
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, "connected") {
		t.Errorf("crm_connect said %q", text)
	}
	select {
	case <-h.changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed within 10 s of the consent")
	}
	after := toolNames(t, ctx, cs)
	if _, still := after["crm_connect"]; still || after["crm_whoami"] == nil {
		t.Fatalf("after consent, the host is shown %v, want crm's real tools", slices.Sorted(maps.Keys(after)))
	}
	if got, err := whoamiVia(ctx, cs); err != nil || got != "you are alice-at-crm" || len(h.asked()) != 1 {
		t.Errorf("crm_whoami after consent: %q, %v (asked %d times)", got, err, len(h.asked()))
	}
}
