package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/redistest"
)

// An authorization's state is spent by its first use, by Manifold itself:
// a callback replayed with the same state and code is refused, and sends
// the token endpoint nothing, though this authorization server would
// exchange the same code again. In the process's own store and in Redis.
func TestOAuthStateSpentByFirstUse(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			is, as := newIssuer(t), newAuthServer(t)
			as.reusableCodes = true
			extra := ""
			if store == "redis" {
				extra = fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", redistest.Start(t).URL())
			}
			p := oauthProxy(t, is, as, extra)
			alice := is.mint("rsa-1", claims{"sub": "alice"})
			first := whoami(t, p.URL, alice, "")
			if first.link == "" {
				t.Fatalf("not asked to consent: %+v", first)
			}
			callback := callbackOf(t, first.link, "alice-at-crm")
			if status, page := get(t, callback); status != http.StatusOK {
				t.Fatalf("the callback answered %d: %s", status, page)
			}
			exchanges, _ := as.counts()
			if status, page := get(t, callback); status != http.StatusBadRequest || !strings.Contains(page, "could not be completed") {
				t.Errorf("the callback again, same state and code: %d %s", status, page)
			}
			if now, _ := as.counts(); now != exchanges {
				t.Errorf("the replayed callback was exchanged at the token endpoint (%d exchanges, then %d)", exchanges, now)
			}
			if got := whoami(t, p.URL, alice, first.retry()); got.text != "you are alice-at-crm" {
				t.Errorf("alice after her consent: %+v", got)
			}
		})
	}
}

// Two principals' grants stay apart in the store two replicas share: Alice
// consents through one replica, Bob through the other; both replicas are
// restarted (nothing left in their memory), and each principal is served
// on either, as its own user, without being asked again.
func TestOAuthGrantsApartAcrossRestart(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	extra := fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", redistest.Start(t).URL())
	la, lb := listenLoopback(t, ""), listenLoopback(t, "")
	public := "http://" + lb.Addr().String() // the authorization server sends users back to b
	a, b := oauthProxyOn(t, la, public, is, as, extra), oauthProxyOn(t, lb, public, is, as, extra)
	users := []struct{ who, user string }{{"alice", "alice-at-crm"}, {"bob", "bob-at-crm"}}
	tokens := map[string]string{}
	for i, u := range users {
		tokens[u.who] = is.mint("rsa-1", claims{"sub": u.who})
		if got := authorize(t, []*proxy{a, b}[i].URL, tokens[u.who], u.user); got != "you are "+u.user {
			t.Fatalf("%s after consent: %q", u.who, got)
		}
	}
	exchanges, _ := as.counts()
	addrA, addrB := la.Addr().String(), lb.Addr().String()
	a.stop()
	b.stop()
	a = oauthProxyOn(t, listenLoopback(t, addrA), public, is, as, extra)
	b = oauthProxyOn(t, listenLoopback(t, addrB), public, is, as, extra)
	for round := range 2 {
		for i, u := range users {
			on := []*proxy{b, a}[(i+round)%2]
			if got := whoami(t, on.URL, tokens[u.who], ""); got.text != "you are "+u.user {
				t.Errorf("after the restart, %s on %s: %+v", u.who, on.URL, got)
			}
		}
	}
	if now, _ := as.counts(); now != exchanges {
		t.Errorf("%d consents after the restart", now-exchanges)
	}
}

// listenLoopback listens on addr (a free port when ""), retrying a moment
// while a stopped replica's port is let go.
func listenLoopback(t *testing.T, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var l net.Listener
	eventually(t, 5*time.Second, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l
}

// A consent begun before a reload that changed the upstream's OAuth
// settings is refused at the callback: the authorization was asked under
// settings no longer in force (here, fewer scopes). The token endpoint is
// not asked, and the user is asked again, under the new settings.
func TestOAuthConsentBeforeReloadRefused(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	l := listenLoopback(t, "")
	yaml := func(scopes string) string {
		return fmt.Sprintf("public_url: http://%s\n%supstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user, scopes: [%s]}\n",
			l.Addr(), is.authYAML(""), as.MCP, scopes)
	}
	path := writeConfig(t, yaml("crm:read"))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxyOn(t, cfg, l)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	first := whoami(t, p.URL, alice, "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	callback := callbackOf(t, first.link, "alice-at-crm") // consented; the browser is on its way back
	if err := os.WriteFile(path, []byte(yaml("crm:read, crm:write")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if status, page := get(t, callback); status != http.StatusBadRequest || !strings.Contains(page, "could not be completed") {
		t.Errorf("the callback of a consent begun before the reload: %d %s", status, page)
	}
	if exchanges, _ := as.counts(); exchanges != 0 {
		t.Errorf("the refused callback made %d token requests", exchanges)
	}
	if got := whoami(t, p.URL, alice, ""); got.link == "" {
		t.Errorf("alice was not asked again under the new settings: %+v", got)
	}
}
