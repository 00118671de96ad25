package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// answering is a fill that counts its calls and answers with hints (the
// members ttlMs and cacheScope as the upstream spelt them, or left out)
// and a text naming the caller and the call.
func answering(calls *atomic.Int64, hints string, r Request) Fill {
	return func(context.Context) (json.RawMessage, error) {
		n := calls.Add(1)
		return json.RawMessage(fmt.Sprintf(`{"resultType":"complete",%s"contents":[{"uri":%s,"text":"for %s, call %d"}]}`,
			hints, r.Req.Params["uri"], r.Req.Header.Get("Authorization"), n)), nil
	}
}

// The cache's own reading of cacheScope: only exactly "public" is shared
// between credentials; any other spelling, an empty one or none at all is
// private. A private answer is still kept, for its own credential alone:
// on the replica that filled it and, through Redis, on another.
func TestScopeIsPrivateUnlessExactlyPublic(t *testing.T) {
	rs := redistest.Start(t)
	a, b := newCache(t, testOptions(rs.URL()), nil), newCache(t, testOptions(rs.URL()), nil)
	for i, c := range []struct {
		hints  string // "": none
		shared bool
	}{
		{`"cacheScope":"public",`, true},
		{`"cacheScope":"private",`, false},
		{`"cacheScope":"Public",`, false},
		{`"cacheScope":"PUBLIC",`, false},
		{`"cacheScope":" public",`, false},
		{`"cacheScope":"shared",`, false},
		{`"cacheScope":"",`, false},
		{`"cacheScope":null,`, false},
		{``, false}, // none at all
	} {
		var calls atomic.Int64
		hints := `"ttlMs":60000,` + c.hints
		uri := fmt.Sprintf("test://scope/%d", i)
		alice, bob := read(uri, "token-A"), read(uri, "token-B")
		first, _, _ := get(t, a, alice, answering(&calls, hints, alice))
		a.redis.pending.Wait() // the write to Redis is asynchronous
		want, wantScope := "for Bearer token-B", "private"
		if c.shared {
			want, wantScope = first, "public"
		}
		for name, replica := range map[string]*Cache{"the same replica": a, "another replica": b} {
			// Alice's entry is hers, whatever its scope.
			if text, _, scope := get(t, replica, alice, answering(&calls, hints, alice)); text != first || scope != wantScope {
				t.Errorf("%s: Alice again, on %s: %q, cacheScope %q; want her entry %q, %q", c.hints, name, text, scope, first, wantScope)
			}
			if text, _, _ := get(t, replica, bob, answering(&calls, hints, bob)); !strings.HasPrefix(text, want) {
				t.Errorf("%s: Bob, on %s, was served %q, want %q", c.hints, name, text, want)
			}
			b.redis.pending.Wait()
		}
	}
}

// An answer that says ttlMs 0 (or nothing, or less than a millisecond) is
// stored nowhere: the next read asks the upstream again, on the replica that
// filled it and on another, and when the upstream cannot be reached there
// is no entry to stand in for it.
func TestZeroTTLIsNeverStored(t *testing.T) {
	rs := redistest.Start(t)
	a, b := newCache(t, testOptions(rs.URL()), nil), newCache(t, testOptions(rs.URL()), nil)
	down := func(context.Context) (json.RawMessage, error) { return nil, fmt.Errorf("dial: %w", ErrUnreachable) }
	for i, hints := range []string{
		`"ttlMs":0,"cacheScope":"public",`,
		`"ttlMs":0,"cacheScope":"private",`,
		`"ttlMs":0.4,"cacheScope":"public",`,
		`"ttlMs":-5000,"cacheScope":"public",`,
		`"ttlMs":null,"cacheScope":"public",`,
		`"cacheScope":"public",`,
	} {
		var calls atomic.Int64
		r := read(fmt.Sprintf("test://zero/%d", i), "token-A")
		for n, replica := range []*Cache{a, a, b} {
			if _, err := replica.Get(context.Background(), r, answering(&calls, hints, r)); err != nil {
				t.Fatalf("%s: read %d: %v", hints, n+1, err)
			}
			a.redis.pending.Wait()
			if got := calls.Load(); got != int64(n+1) {
				t.Errorf("%s: read %d made %d upstream calls in all, want %d: it was answered from the cache", hints, n+1, got, n+1)
			}
		}
		for _, replica := range []*Cache{a, b} {
			if res, err := replica.Get(context.Background(), r, down); err == nil {
				t.Errorf("%s: with the upstream unreachable, a kept answer stood in: %s", hints, res)
			}
		}
	}
}
