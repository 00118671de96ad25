package oauth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// renewFixture is a client holding alice's grant, whose token endpoint
// answers a refresh as answer says.
func renewFixture(t *testing.T, answer http.HandlerFunc) (*Client, *grant) {
	t.Helper()
	srv := httptest.NewServer(answer)
	t.Cleanup(srv.Close)
	c := New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: srv.Client(), Store: NewMemoryStore()}, []byte("secret-0123456789"))
	g := &grant{Access: "old", Refresh: "r1", Expires: time.Now().Add(10 * time.Second), Resource: srv.URL + "/mcp", Token: srv.URL + "/token", Reg: registration{ClientID: "m", AuthMethod: "none"}}
	if err := c.keep(context.Background(), "alice", g); err != nil {
		t.Fatal(err)
	}
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
	ug := unavailable.grants["alice"]
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
