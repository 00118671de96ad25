package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

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
