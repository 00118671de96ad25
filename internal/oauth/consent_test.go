package oauth

import (
	"context"
	"runtime"
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
