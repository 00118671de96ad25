package test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/redistest"
)

// The grants Manifold holds for its users, against a real authorization
// server (oidc-provider, which rotates refresh tokens and revokes the whole
// grant when a spent one comes back) and a real Redis that fails under it.

// idpProxy is a Manifold trusting is for its callers, with the MCP server
// p protects as its upstream crm (oauth mode user), and extra
// configuration before the upstreams.
// Its public_url is public, or its own address when public is "".
func idpProxy(t *testing.T, is *issuer, p *idp, public, extra string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if public == "" {
		public = "http://" + l.Addr().String()
	}
	yaml := fmt.Sprintf("public_url: %s\n%s%supstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n", public, is.authYAML(""), extra, p.MCP)
	cfg, problems := config.Parse([]byte(yaml), os.LookupEnv)
	if len(problems) > 0 {
		t.Fatalf("config: %v\n%s", problems, yaml)
	}
	return startProxyOn(t, cfg, l)
}

// authorizeAt takes token's caller through the consent at p as user.
func authorizeAt(t *testing.T, url, token, user string) string {
	t.Helper()
	first := whoami(t, url, token, "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	if status, page := consentAt(t, first.link, user); status != 200 {
		t.Fatalf("the callback answered %d: %s", status, page)
	}
	return whoami(t, url, token, first.retry()).text
}

// servedUntil calls crm_whoami as alice every 300 ms until done reports
// true, and fails the test on any call not served as alice: asked to
// consent again, failed, or slower than a hung store may make it.
func servedUntil(t *testing.T, url, token string, within time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not done within %v", within)
		}
		start := time.Now()
		got := whoami(t, url, token, "")
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("a call took %v: a hung token store held it", took.Round(time.Millisecond))
		}
		if got.text != "you are alice" {
			t.Fatalf("alice was not served: %+v", got)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// Redis pauses while alice's token is refreshed: the new grant cannot be
// stored. It stays in memory, serves her, and is stored once Redis is
// back; when the token expires again, the refresh uses the newest refresh
// token, never the spent one the store still held (which would have the
// server revoke her whole grant), and she is never asked again. A replica
// that holds nothing of hers fails at once while Redis hangs, and one
// started after the pause finds her newest grant in the store.
func TestOAuthGrantOutlivesARedisPause(t *testing.T) {
	is, p, rs := newIssuer(t), startIdP(t, 8*time.Second), redistest.Start(t)
	extra := fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", rs.URL())
	a := idpProxy(t, is, p, "", extra)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	if got := authorizeAt(t, a.URL, alice, "alice"); got != "you are alice" {
		t.Fatalf("after consenting: %q", got)
	}

	before := p.stats(t).Refreshes
	rs.Pause()
	servedUntil(t, a.URL, alice, 30*time.Second, func() bool { return p.stats(t).Refreshes > before })
	// A replica that holds nothing of alice's cannot read her grant: it
	// says so, at once, rather than wait on Redis or ask her again.
	c := idpProxy(t, is, p, strings.TrimSuffix(a.URL, "/mcp"), extra)
	for range 3 {
		start := time.Now()
		got := whoami(t, c.URL, alice, "")
		if took := time.Since(start); took > 3*time.Second || got.link != "" || got.errCode != -32603 {
			t.Errorf("a replica without alice's grant, Redis hung: %+v after %v; want -32603 at once, no consent asked", got, took.Round(time.Millisecond))
		}
	}
	for _, r := range []*proxy{a, c} {
		if logs := r.Logs.String(); strings.Contains(logs, "upstream failing") {
			t.Errorf("a token store that hangs was taken for the upstream failing:\n%s", logs)
		}
	}
	rs.Resume()
	servedUntil(t, a.URL, alice, 40*time.Second, func() bool { return p.stats(t).Refreshes > before+2 })

	b := idpProxy(t, is, p, strings.TrimSuffix(a.URL, "/mcp"), extra) // a replica: the same public_url
	if got := whoami(t, b.URL, alice, ""); got.text != "you are alice" {
		t.Errorf("a replica started after the pause: %+v", got)
	}
	if s := p.stats(t); s.Reused != 0 || s.Revoked != 0 || s.Authorizations != 1 {
		t.Errorf("the authorization server saw %+v; want no spent refresh token sent again, no grant revoked, one consent", s)
	}
}

// Two replicas serve alice at once, every time her token falls due: only
// one of them refreshes it, the other waits for the grant it stores, and
// no refresh token is ever sent twice (oidc-provider, which rotates them,
// would take a second use for a stolen token and revoke her whole grant).
func TestOAuthReplicasRefreshOnce(t *testing.T) {
	is, p, rs := newIssuer(t), startIdP(t, 5*time.Second), redistest.Start(t)
	extra := fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", rs.URL())
	a := idpProxy(t, is, p, "", extra)
	b := idpProxy(t, is, p, strings.TrimSuffix(a.URL, "/mcp"), extra)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	if got := authorizeAt(t, a.URL, alice, "alice"); got != "you are alice" {
		t.Fatalf("after consenting: %q", got)
	}
	deadline := time.Now().Add(60 * time.Second)
	var failed atomic.Bool
	for !failed.Load() && p.stats(t).Refreshes < 4 && time.Now().Before(deadline) {
		var wg sync.WaitGroup
		for _, r := range []*proxy{a, b, a, b} {
			wg.Go(func() {
				if got := whoami(t, r.URL, alice, ""); got.text != "you are alice" && !failed.Swap(true) {
					t.Errorf("alice was not served: %+v", got)
				}
			})
		}
		wg.Wait()
		time.Sleep(150 * time.Millisecond)
	}
	if s := p.stats(t); s.Refreshes < 4 || s.Reused != 0 || s.Revoked != 0 || s.Authorizations != 1 {
		t.Errorf("the authorization server saw %+v; want 4 refreshes or more, no spent refresh token sent again, no grant revoked, one consent", s)
	}
}
