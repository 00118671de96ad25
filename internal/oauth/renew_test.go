package oauth

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
)

// renewFixture is a client holding alice's grant, whose token endpoint
// answers a refresh as answer says.
func renewFixture(t *testing.T, answer http.HandlerFunc) (*Client, *grant) {
	t.Helper()
	srv := httptest.NewServer(answer)
	t.Cleanup(srv.Close)
	c := New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: srv.Client(), Store: NewMemoryStore()}, []byte("secret-0123456789"))
	g := &grant{Access: "old", Refresh: "r1", Expires: time.Now().Add(10 * time.Second), Resource: srv.URL + "/mcp", Token: srv.URL + "/token",
		Reg: registration{ClientID: "m", AuthMethod: "none"}, Version: nextVersion(0)}
	c.keep(context.Background(), "alice", g)
	return c, g
}

func bearer(w http.ResponseWriter, access string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, access)
}

// A refresh shared by two requests of one user outlives the first one
// leaving: the second gets the new token, and the grant is kept.
func TestRefreshOutlivesTheCallerThatStartedIt(t *testing.T) {
	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c, g := renewFixture(t, func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(asked) })
		<-release
		bearer(w, "new")
	})
	first, leave := context.WithCancel(context.Background())
	go func() { _, _ = c.renew(first, "alice", g) }()
	<-asked
	second := make(chan *grant, 1)
	go func() {
		got, _ := c.renew(context.Background(), "alice", g)
		second <- got
	}()
	leave()
	time.Sleep(50 * time.Millisecond) // the cancellation has reached the flight, if it can
	close(release)
	if got := <-second; got == nil || got.Access != "new" {
		t.Fatalf("the request that stayed got %+v, want the refreshed token", got)
	}
	if kept, _ := c.current(context.Background(), "alice"); kept == nil || kept.Access != "new" {
		t.Errorf("after the first caller left, the grant is %+v", kept)
	}
}

// A refresh that cannot be had (the server unavailable) keeps the grant
// and says so; one the server refuses (invalid_grant) drops it, and the
// user is asked again.
func TestRefreshDropsOnlyWhatTheServerRefused(t *testing.T) {
	unavailable, _ := renewFixture(t, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) })
	gone, gg := renewFixture(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"invalid_grant"}`)
	})
	ug := unavailable.held.get("alice")
	if got, err := unavailable.renew(context.Background(), "alice", ug); err == nil || got != nil {
		t.Errorf("refresh against a 503: %+v, %v; want an error", got, err)
	}
	if _, err := unavailable.o.Store.Get(context.Background(), unavailable.grantKey("alice")); err != nil {
		t.Errorf("a 503 dropped the grant: %v", err)
	}
	if got, err := gone.renew(context.Background(), "alice", gg); err != nil || got != nil {
		t.Errorf("refresh refused: %+v, %v; want no grant", got, err)
	}
	if _, err := gone.o.Store.Get(context.Background(), gone.grantKey("alice")); err == nil {
		t.Error("a refused refresh kept the grant")
	}
}

// Two replicas share the token store; the server rotates refresh tokens
// and refuses a spent one (OAuth 2.1 for public clients). Both replicas
// hold alice's grant in memory when it falls due. The first refreshes; the
// second, whose copy is now stale, takes the grant the first stored
// rather than spend the old refresh token, and the grant survives: no
// replica drops it, and alice is not asked to consent again. Then a
// refresh refused for a token no one refreshed drops it, as before.
func TestReplicasShareARotatedRefresh(t *testing.T) {
	var mu sync.Mutex
	current, n, refusals := "r1", 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		defer mu.Unlock()
		if r.Form.Get("refresh_token") != current {
			refusals++
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_grant"}`)
			return
		}
		n++
		current = fmt.Sprintf("r%d", n+1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"a%d","token_type":"Bearer","expires_in":3600,"refresh_token":%q}`, n+1, current)
	}))
	t.Cleanup(srv.Close)
	// Time passes in a synctest bubble: see TestShortLivedTokenIsNotRefreshedEachRequest.
	noKeepAlive := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	synctest.Test(t, func(t *testing.T) {
		store := NewMemoryStore()
		replica := func() *Client {
			return New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: noKeepAlive, Store: store}, []byte("secret-0123456789"))
		}
		a, b := replica(), replica()
		due := &grant{Access: "a1", Refresh: "r1", Expires: time.Now().Add(refreshAhead + 500*time.Millisecond), Resource: srv.URL + "/mcp", Token: srv.URL + "/token", Reg: registration{ClientID: "m", AuthMethod: "none"}}
		a.keep(context.Background(), "alice", due)
		for _, c := range []*Client{a, b} {
			if g, err := c.current(context.Background(), "alice"); err != nil || g == nil {
				t.Fatalf("loading the grant: %+v, %v", g, err)
			}
		}
		time.Sleep(600 * time.Millisecond) // both now hold a grant due for a refresh
		ga, err := a.current(context.Background(), "alice")
		if err != nil || ga == nil || ga.Access != "a2" {
			t.Fatalf("replica a's refresh: %+v, %v", ga, err)
		}
		gb, err := b.current(context.Background(), "alice") // its memory still holds a1, due
		if err != nil || gb == nil || gb.Access != "a2" {
			t.Fatalf("replica b after a refreshed: %+v, %v; want a's grant, a2", gb, err)
		}
		if refusals != 0 {
			t.Errorf("%d refreshes refused: a spent refresh token was sent", refusals)
		}
		if g, _ := replica().current(context.Background(), "alice"); g == nil || g.Access != "a2" {
			t.Errorf("the store holds %+v after both replicas; want a2", g)
		}
		// A refresh token the server no longer accepts, refused with nothing
		// newer stored, still drops the grant.
		mu.Lock()
		current = "revoked"
		mu.Unlock()
		spent := *gb
		spent.Issued, spent.Expires, spent.Version = time.Time{}, time.Now().Add(10*time.Second), nextVersion(gb.Version)
		a.keep(context.Background(), "alice", &spent)
		if g, err := a.current(context.Background(), "alice"); err != nil || g != nil {
			t.Errorf("a refused refresh: %+v, %v; want the grant dropped", g, err)
		}
		if _, err := store.Get(context.Background(), a.grantKey("alice")); err == nil {
			t.Error("the refused grant is still stored")
		}
	})
}

// A token's lifetime as the server states it, however large, gives an
// expiry ahead, not one wrapped into the past (which would have the token
// refreshed, or the user asked again, on every request); it is held to a
// year, after which the token is refreshed anyway.
func TestHugeExpiresInIsAhead(t *testing.T) {
	c, g := renewFixture(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"forever","token_type":"Bearer","expires_in":1e12,"refresh_token":"r2"}`)
	})
	got, err := c.renew(context.Background(), "alice", g)
	if err != nil || got == nil {
		t.Fatalf("refresh: %+v, %v", got, err)
	}
	if !got.Expires.After(time.Now().Add(300*24*time.Hour)) || got.Expires.After(time.Now().Add(367*24*time.Hour)) {
		t.Errorf("expires_in 1e12 s gave an expiry at %v; want about a year ahead", got.Expires)
	}
	if again, _ := c.current(context.Background(), "alice"); again == nil || again.Access != "forever" {
		t.Errorf("the next request's grant: %+v, want the same token, not refreshed again", again)
	}
}

// A token endpoint's refusal is told (and logged) by what RFC 6749 §5.2
// says it holds, its error and description, never by its body whole: a
// server that echoes the refresh token it refused, or sends a token
// beside its error, has neither written to the log.
func TestRefusalKeepsNoToken(t *testing.T) {
	for _, body := range []string{
		`{"refresh_token":"rt-secret","error":"invalid_grant","error_description":"expired"}`,
		`{"error":"invalid_grant","access_token":"at-secret"}`,
		`refresh_token=rt-secret&error=invalid_grant`,
		`{"error":"invalid_grant","error_description":"` + strings.Repeat("é", 4000) + `"}`,
		`{"error":"` + strings.Repeat("x", 4000) + `"}`,
	} {
		c, g := renewFixture(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, body)
		})
		_, err := c.requestToken(context.Background(), g.Token, g.Reg, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {g.Refresh}})
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("refusal %s: %v; want an error without the token", body, err)
		}
		if strings.Contains(body, `"error":"invalid_grant"`) && !strings.Contains(err.Error(), "invalid_grant") {
			t.Errorf("refusal %s: %v; want the error named", body, err)
		}
		if len(err.Error()) > 400 || !utf8.ValidString(err.Error()) {
			t.Errorf("a refusal of %d bytes told in %d bytes (valid UTF-8: %v); want it bounded, whole characters", len(body), len(err.Error()), utf8.ValidString(err.Error()))
		}
	}
}

// A token living less than a minute is refreshed a fifth of its lifetime
// before it expires, not on every request (with the minute ahead of a
// long-lived token, it would be due as soon as it was issued).
func TestShortLivedTokenIsNotRefreshedEachRequest(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := tokenServer(t, func(w http.ResponseWriter, _ string) {
		mu.Lock()
		n++
		fmt.Fprintf(w, `{"access_token":"a%d","token_type":"Bearer","expires_in":2,"refresh_token":"r%d"}`, n, n)
		mu.Unlock()
	})
	// The token's life passes in a synctest bubble's time. A connection
	// kept open would be a goroutine reading the network, which holds the
	// bubble's clock still: each refresh has its own.
	synctest.Test(t, func(t *testing.T) {
		c := New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, Store: NewMemoryStore(),
			HTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}, []byte("secret-0123456789"))
		ctx := context.Background()
		stale := srv.grant("a0", "r0")
		stale.Expires = time.Now().Add(-time.Millisecond) // the bubble's clock stands still between two lines
		c.keep(ctx, "alice", stale)
		for range 10 {
			if g, err := c.current(ctx, "alice"); err != nil || g == nil || g.Access != "a1" {
				t.Fatalf("with a two-second token: %+v, %v; want a1, refreshed once", g, err)
			}
		}
		time.Sleep(1700 * time.Millisecond) // past four fifths of its lifetime
		if g, _ := c.current(ctx, "alice"); g == nil || g.Access != "a2" {
			t.Errorf("at 1.7 s of a 2 s token: %+v; want it refreshed", g)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if n != 2 {
		t.Errorf("%d refreshes, want 2", n)
	}
}

// A token endpoint that answers with a redirect is never followed by a
// POST: the place it points to (here an address discovery would refuse)
// gets neither the code and PKCE verifier, nor a refresh token, nor the
// client's secret. And a redirect is no refusal of the authorization
// server's: the grant is kept. A metadata GET follows a redirect only to
// a URL discovery accepts.
func TestTokenEndpointRedirectsAreNotFollowed(t *testing.T) {
	var sunk sync.Map
	sink := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sunk.Store(r.Method+" "+r.URL.Path+" "+string(b)+" "+r.Header.Get("Authorization"), true)
		refuse(w, "invalid_grant")
	}))
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	sink.Listener = l
	sink.Start()
	t.Cleanup(sink.Close)
	elsewhere := "http://0.0.0.0:" + fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere+r.URL.Path, status)
		}))
		t.Cleanup(srv.Close)
		c := New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: srv.Client(), Store: NewMemoryStore()}, []byte("secret-0123456789"))
		g := &grant{Access: "a1", Refresh: "rt-secret", Expires: time.Now(), Resource: srv.URL + "/mcp", Token: srv.URL + "/token",
			Reg: registration{ClientID: "m", ClientSecret: "client-secret", AuthMethod: "client_secret_post"}, Version: nextVersion(0)}
		c.keep(context.Background(), "alice", g)
		if got, err := c.current(context.Background(), "alice"); err == nil || got != nil {
			t.Errorf("a refresh answered %d: %+v, %v; want it failed", status, got, err)
		}
		if c.held.get("alice") == nil {
			t.Errorf("a refresh answered %d dropped the grant", status)
		}
		form := url.Values{"grant_type": {"authorization_code"}, "code": {"the-code"}, "code_verifier": {"the-verifier"}}
		if _, err := c.requestToken(context.Background(), g.Token, g.Reg, form); err == nil {
			t.Errorf("a code exchange answered %d succeeded", status)
		}
		var m serverMetadata
		if _, err := c.getJSON(context.Background(), srv.URL+"/.well-known/oauth-authorization-server", &m); err == nil || !strings.Contains(err.Error(), "not https") {
			t.Errorf("metadata redirected (%d) to %s: %v; want refused as not https", status, elsewhere, err)
		}
	}
	sunk.Range(func(k, _ any) bool {
		t.Errorf("the redirect's target got %q", k)
		return true
	})
}

// Only the authorization server's own refusal drops a grant: a 400 page of
// something in between, which is no RFC 6749 error, keeps it.
func TestOnlyARefusalDropsTheGrant(t *testing.T) {
	for _, body := range []string{`<html>Bad Request</html>`, `{"message":"bad gateway config"}`, `{"error":"invalid_request"}`} {
		srv := tokenServer(t, func(w http.ResponseWriter, _ string) {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, body)
		})
		c := srv.client(NewMemoryStore())
		g := srv.grant("a1", "r1")
		c.keep(context.Background(), "alice", g)
		if got, err := c.renew(context.Background(), "alice", g); err == nil || got != nil {
			t.Errorf("a 400 of %s: %+v, %v; want a failure", body, got, err)
		}
		if c.held.get("alice") == nil {
			t.Errorf("a 400 of %s dropped the grant", body)
		}
	}
}

// A refusal's description that echoes a token is logged without it: the
// error code is logged, and the description with anything token-shaped
// taken out.
func TestRefusalLogHoldsNoToken(t *testing.T) {
	const secret = "8xQ2mZ_4kLw9VtR3pYs7NbHc"
	srv := tokenServer(t, func(w http.ResponseWriter, _ string) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"refresh token %s is expired; eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl was revoked"}`, secret)
	})
	var logs strings.Builder
	var mu sync.Mutex
	c := New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: srv.Client(), Store: NewMemoryStore(),
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))}, []byte("secret-0123456789"))
	g := srv.grant("a1", "r1")
	c.keep(context.Background(), "alice", g)
	if got, err := c.renew(context.Background(), "alice", g); err != nil || got != nil {
		t.Fatalf("a refusal: %+v, %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	out := logs.String()
	if strings.Contains(out, secret) || strings.Contains(out, "eyJ") {
		t.Errorf("the log holds the echoed token:\n%s", out)
	}
	if !strings.Contains(out, "invalid_grant") || !strings.Contains(out, "is expired") {
		t.Errorf("the log does not say what was refused:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Two replicas sharing a store, whose requests find alice's token due at
// the same moment: one refresh reaches the server, and both serve the
// grant it made.
func TestReplicasShareOneRefresh(t *testing.T) {
	var mu sync.Mutex
	refreshes := 0
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refreshes++
		mu.Unlock()
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"a2","token_type":"Bearer","expires_in":3600,"refresh_token":"r2"}`)
	}))
	t.Cleanup(srv.Close)
	store := NewMemoryStore()
	replica := func() *Client {
		return New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: srv.Client(), Store: store}, []byte("secret-0123456789"))
	}
	a, b := replica(), replica()
	due := &grant{Access: "a1", Refresh: "r1", Expires: time.Now().Add(30 * time.Second), Resource: srv.URL + "/mcp", Token: srv.URL + "/token",
		Reg: registration{ClientID: "m", AuthMethod: "none"}, Version: nextVersion(0)}
	a.keep(context.Background(), "alice", due)
	got := make(chan *grant, 2)
	for _, c := range []*Client{a, b} {
		go func() {
			g, err := c.current(context.Background(), "alice")
			if err != nil {
				t.Error(err)
			}
			got <- g
		}()
	}
	<-arrived
	select {
	case <-arrived:
		t.Error("both replicas sent the refresh token")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	for range 2 {
		if g := <-got; g == nil || g.Access != "a2" {
			t.Errorf("a replica got %+v; want the refreshed grant, a2", g)
		}
	}
	if refreshes != 1 {
		t.Errorf("%d refreshes reached the server; want 1", refreshes)
	}
}
