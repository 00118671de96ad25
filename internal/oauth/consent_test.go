package oauth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"sync"
	"testing"
)

// A user's calls that each need consent, 20,000 of them, keep one pending
// authorization and are shown one URL, not one each: the store (shared by
// everyone's tokens and consents) stays small, and another user's consent
// is still kept.
func TestConsentsOfOneUserAreBounded(t *testing.T) {
	store := NewMemoryStore()
	c := New(Options{Upstream: "crm", Resource: "https://crm.example.com/mcp", Mode: ModeUser, ClientID: "m",
		RedirectURI: "https://manifold.example.com/oauth/callback", Store: store}, []byte("secret-0123456789"))
	d := &discovery{resource: "https://crm.example.com/mcp", server: &serverMetadata{Issuer: "https://as.example.com",
		AuthorizationEndpoint: "https://as.example.com/authorize", TokenEndpoint: "https://as.example.com/token"}}
	ctx := context.Background()
	first, err := c.consent(ctx, "alice", d, []string{"read"})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 20_000 {
		again, err := c.consent(ctx, "alice", d, []string{"read"})
		if err != nil {
			t.Fatal(err)
		}
		if again.URL != first.URL {
			t.Fatalf("a repeated consent got another URL: %s", again.URL)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	store.mu.Lock()
	n := len(store.entries)
	store.mu.Unlock()
	if n != 1 {
		t.Errorf("20,001 consents of one user left %d entries in the store", n)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Errorf("20,000 repeated consents grew the heap by %d bytes", grew)
	}
	bob, err := c.consent(ctx, "bob", d, []string{"read"})
	if err != nil || bob.URL == first.URL {
		t.Errorf("bob's consent: %v, the same URL as alice's: %v", err, bob != nil && bob.URL == first.URL)
	}
}

// A dynamic registration the authorization server no longer knows (it
// answers the code's exchange invalid_client) is forgotten, on every
// replica: the next consent registers again, instead of sending users to
// a dead client id until the kept registration expires, 30 days on.
func TestDeadRegistrationIsForgotten(t *testing.T) {
	var mu sync.Mutex
	registered := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/register":
			registered++
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"client_id":"client-%d","token_endpoint_auth_method":"none"}`, registered)
		case "/token":
			_ = r.ParseForm()
			if r.Form.Get("client_id") == "client-1" {
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"error":"invalid_client"}`)
				return
			}
			fmt.Fprint(w, `{"access_token":"a","token_type":"Bearer","expires_in":3600}`)
		}
	}))
	t.Cleanup(srv.Close)
	c := New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: srv.Client(),
		RedirectURI: "http://127.0.0.1/oauth/callback", Store: NewMemoryStore()}, []byte("secret-0123456789"))
	d := &discovery{resource: srv.URL + "/mcp", server: &serverMetadata{Issuer: srv.URL, AuthorizationEndpoint: srv.URL + "/authorize",
		TokenEndpoint: srv.URL + "/token", RegistrationEndpoint: srv.URL + "/register"}}
	ctx := context.Background()
	consent := func() url.Values {
		t.Helper()
		cr, err := c.consent(ctx, "alice", d, []string{"read"})
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(cr.URL)
		conn, err := c.Connection(ctx, u.Query().Get("state")) // where the consent page leads
		if err != nil {
			t.Fatal(err)
		}
		a, _ := url.Parse(conn.URL)
		return a.Query()
	}
	first := consent()
	if first.Get("client_id") != "client-1" {
		t.Fatalf("first consent as %q", first.Get("client_id"))
	}
	var dead registration
	if err := c.load(ctx, c.registrationKey(srv.URL), "", &dead); err != nil {
		t.Fatal(err)
	}
	if err := c.Callback(ctx, url.Values{"state": {first.Get("state")}, "code": {"c"}}); err == nil {
		t.Fatal("the exchange under a client the server no longer knows succeeded")
	}
	second := consent()
	if second.Get("client_id") != "client-2" {
		t.Errorf("the consent after invalid_client as %q; want a new registration, client-2", second.Get("client_id"))
	}
	if err := c.Callback(ctx, url.Values{"state": {second.Get("state")}, "code": {"c"}}); err != nil {
		t.Errorf("the exchange under the new registration: %v", err)
	}
	// A late refusal under the dead registration (another replica's
	// exchange) forgets it alone, never the one made since.
	c.forgetDeadClient(ctx, dead, "invalid_client")
	if third := consent(); third.Get("client_id") != "client-2" {
		t.Errorf("after a late refusal of client-1, the consent is as %q; want client-2 kept", third.Get("client_id"))
	}
}
