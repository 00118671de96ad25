package test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// An upstream whose server requires DPoP (RFC 9449) is served with tokens
// bound to a key of Manifold's, and two replicas sharing Redis share that
// key with the grant: a token one replica obtained works from the other,
// and a refresh on the other (its refresh token bound to the key) asks
// nobody again. Every request goes with a fresh proof that the server
// checks for real, with the server's nonce once it asked for it; neither
// Redis nor the log holds the token or the key in clear.
func TestOAuthDPoPAcrossReplicas(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	as.dpop = newDPoPServer("server-nonce-1")
	rs := redistest.Start(t)
	extra := fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", rs.URL())
	a, b := twoReplicas(t, is, as, extra)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	if got := authorize(t, a.URL, alice, "alice-at-crm"); got != "you are alice-at-crm" {
		t.Fatalf("on a, after a consent completed on b: %q", got)
	}
	if got := whoami(t, b.URL, alice, ""); got.text != "you are alice-at-crm" {
		t.Fatalf("on b, with the token a obtained: %+v", got)
	}
	as.revoke("alice-at-crm", false)
	if got := whoami(t, b.URL, alice, ""); got.text != "you are alice-at-crm" {
		t.Errorf("on b, after the server refused the token: %+v", got)
	}
	if got := whoami(t, a.URL, alice, ""); got.text != "you are alice-at-crm" {
		t.Errorf("on a, after b refreshed the token: %+v", got)
	}
	if exchanges, refreshes := as.counts(); exchanges != 1 || refreshes != 1 {
		t.Errorf("%d code exchanges and %d refreshes, want 1 and 1", exchanges, refreshes)
	}
	proofs, nonces, failures := as.dpop.report()
	t.Logf("%d valid proofs; nonce challenges %v", proofs, nonces)
	for _, f := range failures {
		t.Errorf("a proof the server refused: %s", f)
	}
	if proofs < 6 || nonces["token"] == 0 || nonces["resource"] == 0 {
		t.Errorf("%d valid proofs and nonce challenges %v: want every request proved, and the nonce asked at the token endpoint and the resource", proofs, nonces)
	}
	assertNoSecretsKept(t, rs, []*proxy{a, b}, "at-alice", "rt-alice", `"d":`)
}

// assertNoSecretsKept fails if Redis or a replica's log holds any of
// secrets in clear.
func assertNoSecretsKept(t *testing.T, rs *redistest.Server, replicas []*proxy, secrets ...string) {
	t.Helper()
	keys, _ := rs.Client().Keys(context.Background(), "*").Result()
	for _, k := range keys {
		v := redisValue(t, rs, k)
		for _, s := range secrets {
			if strings.Contains(v, s) {
				t.Errorf("Redis holds %q in clear under %s", s, k)
			}
		}
	}
	for i, p := range replicas {
		for _, s := range secrets {
			if strings.Contains(p.Logs.String(), s) {
				t.Errorf("replica %d logged %q", i, s)
			}
		}
	}
}

// redisValue is what Redis holds under key, whatever its type: a grant is
// a hash (its version and its data), which a GET does not read.
func redisValue(t *testing.T, rs *redistest.Server, key string) string {
	t.Helper()
	ctx := context.Background()
	typ, err := rs.Client().Type(ctx, key).Result()
	if err != nil {
		t.Fatalf("TYPE %s: %v", key, err)
	}
	switch typ {
	case "string":
		v, _ := rs.Client().Get(ctx, key).Result()
		return v
	case "hash":
		var b strings.Builder
		for f, v := range rs.Client().HGetAll(ctx, key).Val() {
			b.WriteString(f + "=" + v + "\n")
		}
		return b.String()
	case "none":
		return ""
	}
	t.Fatalf("Redis holds a %s under %s, which no scan reads", typ, key)
	return ""
}

// A resource whose challenge is Bearer's but whose metadata says it
// requires DPoP-bound tokens gets them, and no bearer token.
func TestOAuthDPoPFromResourceMetadata(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	as.dpop = newDPoPServer("")
	as.dpop.inMetadata = true
	p := oauthProxy(t, is, as, "")
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	if got := authorize(t, p.URL, alice, "alice-at-crm"); got != "you are alice-at-crm" {
		t.Fatalf("after the consent: %q", got)
	}
	if got := whoami(t, p.URL, alice, ""); got.text != "you are alice-at-crm" {
		t.Errorf("the next call: %+v", got)
	}
	proofs, _, failures := as.dpop.report()
	for _, f := range failures {
		t.Errorf("a proof the server refused: %s", f)
	}
	if proofs < 3 {
		t.Errorf("%d valid proofs, want the code exchange's and each call's", proofs)
	}
}

// A server that requires DPoP whose authorization server does not take
// ES256 proofs is no consent to ask for: the call fails at once, naming
// why in the log.
func TestOAuthDPoPWithoutES256(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	as.dpop = newDPoPServer("")
	as.dpop.algs = []string{"RS256", "EdDSA"}
	p := oauthProxy(t, is, as, "")
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	got := whoami(t, p.URL, alice, "")
	if got.link != "" || got.errCode == 0 {
		t.Fatalf("asked to consent, or served: %+v", got)
	}
	t.Logf("the caller got %d %q", got.errCode, got.errMsg)
	if !strings.Contains(p.Logs.String(), "does not take ES256 proofs") {
		t.Errorf("the log does not say why")
	}
}
