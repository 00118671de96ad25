package oauth

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/breaker"
	"github.com/manifold-mcp/manifold/internal/redistest"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// stores are the two Stores, the Redis one on a real redis-server.
func stores(t *testing.T) map[string]Store {
	rs := redistest.Start(t)
	return map[string]Store{"memory": NewMemoryStore(), "redis": RedisStore{Client: rs.Client(), Prefix: "t:"}}
}

// Replicas writing a principal's grants at once, in any order, leave the
// newest in the store; a drop of a version the store no longer holds
// leaves the newer one; a value is taken once.
func TestStoreKeepsTheNewest(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			versions := rand.Perm(200)
			var wg sync.WaitGroup
			for _, v := range versions {
				wg.Go(func() {
					if _, err := s.Put(ctx, "g", Versioned{Value: fmt.Appendf(nil, "v%d", v+1), Version: int64(v + 1)}, time.Minute); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if got, err := s.Get(ctx, "g"); err != nil || got.Version != 200 || string(got.Value) != "v200" {
				t.Fatalf("after 200 racing writes: %+v, %v; want version 200", got, err)
			}
			if stored, err := s.Put(ctx, "g", Versioned{Value: []byte("old"), Version: 7}, time.Minute); stored || err != nil {
				t.Errorf("an older version was stored: %v, %v", stored, err)
			}
			if err := s.Drop(ctx, "g", 199); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Get(ctx, "g"); got.Version != 200 {
				t.Errorf("dropping version 199 took version 200: %+v", got)
			}
			if err := s.Drop(ctx, "g", 200); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "g"); !errors.Is(err, ErrNotFound) {
				t.Errorf("dropping the version held: %v; want it gone", err)
			}
			if _, err := s.Put(ctx, "state", Versioned{Value: []byte("pending"), Version: 1}, time.Minute); err != nil {
				t.Fatal(err)
			}
			var taken sync.Map
			for range 20 {
				wg.Go(func() {
					if v, err := s.Take(ctx, "state"); err == nil {
						taken.Store(string(v), true)
					}
				})
			}
			wg.Wait()
			n := 0
			taken.Range(func(any, any) bool { n++; return true })
			if _, ok := taken.Load("pending"); !ok || n != 1 {
				t.Errorf("a pending value was taken %d times by 20 racing takers", n)
			}
		})
	}
}

// A value an earlier Manifold stored (a plain string, before versions)
// reads as version 0, and any version replaces it.
func TestRedisStoreReadsValuesOfBefore(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	s := RedisStore{Client: rs.Client(), Prefix: "t:"}
	rs.Client().Set(ctx, "t:g", "sealed-before", time.Minute)
	if got, err := s.Get(ctx, "g"); err != nil || got.Version != 0 || string(got.Value) != "sealed-before" {
		t.Fatalf("a value of before: %+v, %v", got, err)
	}
	if stored, err := s.Put(ctx, "g", Versioned{Value: []byte("now"), Version: 1}, time.Minute); !stored || err != nil {
		t.Fatalf("replacing it: %v, %v", stored, err)
	}
	if got, _ := s.Get(ctx, "g"); got.Version != 1 || string(got.Value) != "now" {
		t.Errorf("after: %+v", got)
	}
}

// A hung store (a paused redis-server) costs a request the guard's
// timeout at most, and once the breaker opens, nothing: the client goes
// on with what it holds. When Redis is back, the store is used again.
func TestGuardedStoreSkipsAHungRedis(t *testing.T) {
	rs := redistest.Start(t)
	g, rdb := NewRedisStore(redis.UniversalOptions{Addrs: []string{rs.Addr}}, "t:", 200*time.Millisecond, breaker.New(3, 300*time.Millisecond, nil))
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if _, err := g.Put(ctx, "k", Versioned{Value: []byte("v"), Version: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	rs.Pause()
	for i := range 10 {
		start := time.Now()
		_, err := g.Get(ctx, "k")
		if took := time.Since(start); err == nil || took > time.Second {
			t.Fatalf("read %d of a hung Redis: %v after %v; want a failure within the guard's timeout", i, err, took)
		}
		if i >= 3 && !errors.Is(err, ErrStoreUnavailable) {
			t.Errorf("read %d: %v; want the open breaker's ErrStoreUnavailable", i, err)
		}
	}
	rs.Resume()
	eventually(t, 5*time.Second, func() error {
		v, err := g.Get(ctx, "k")
		if err == nil && string(v.Value) == "v" {
			return nil
		}
		return fmt.Errorf("Redis back, the store still fails: %v", err)
	})
}

// eventually waits for a condition (testwait.Eventually).
var eventually = testwait.Eventually

// A grant refreshed while the store is down is held in memory, serves the
// principal, and is stored once the store is back; the refresh token it
// replaced is never sent again, even when the store still holds the grant
// it belonged to (nor is that older grant taken for the newer). A reload
// that replaces the client with one of the same configuration keeps it.
func TestGrantTheStoreMissedIsStoredLater(t *testing.T) {
	rs := redistest.Start(t)
	var mu sync.Mutex
	current, n, reused := "r1", 1, 0
	srv := tokenServer(t, func(w http.ResponseWriter, refresh string) {
		mu.Lock()
		defer mu.Unlock()
		if refresh != current {
			reused++
			refuse(w, "invalid_grant")
			return
		}
		n++
		current = fmt.Sprintf("r%d", n)
		fmt.Fprintf(w, `{"access_token":"a%d","token_type":"Bearer","expires_in":3600,"refresh_token":%q}`, n, current)
	})
	store, rdb := NewRedisStore(redis.UniversalOptions{Addrs: []string{rs.Addr}}, "t:", 200*time.Millisecond, breaker.New(2, 200*time.Millisecond, nil))
	t.Cleanup(func() { _ = rdb.Close() })
	c := srv.client(store)
	ctx := context.Background()
	first := srv.grant("a1", "r1")
	c.keep(ctx, "alice", first)

	rs.Pause()
	g, err := c.renew(ctx, "alice", first)
	if err != nil || g == nil || g.Access != "a2" {
		t.Fatalf("refresh with the store down: %+v, %v", g, err)
	}
	if got, _ := c.current(ctx, "alice"); got == nil || got.Access != "a2" {
		t.Fatalf("with the store down, alice's grant is %+v; want the one held in memory, a2", got)
	}
	// A reload replaces the client with one of the same configuration.
	next := srv.client(store)
	if !next.TakeOver(c) {
		t.Fatal("a client of the same configuration did not take over")
	}
	c.Close(ctx)
	c = next
	rs.Resume()
	eventually(t, 10*time.Second, func() error {
		var stored grant
		if err := c.load(ctx, c.grantKey("alice"), "alice", &stored); err == nil && stored.Access == "a2" {
			return nil
		}
		return errors.New("Redis back, the grant refreshed while it was down is not stored")
	})
	// The token falls due: the refresh uses r2, never the spent r1.
	due := *c.held.get("alice")
	due.Expires = time.Now()
	c.held.put("alice", &due)
	if g, err := c.current(ctx, "alice"); err != nil || g == nil || g.Access != "a3" {
		t.Fatalf("the next refresh: %+v, %v; want a3", g, err)
	}
	// A replica that lost alice's newest grant (and whose store still
	// holds the older one) does not send the spent refresh token either.
	c.held.remove("alice", math.MaxInt64)
	rs.Client().FlushAll(ctx)
	c.keep(ctx, "alice", first)
	if g, err := c.renew(ctx, "alice", first); err != nil || g != nil {
		t.Errorf("with only a spent refresh token left: %+v, %v; want the user asked again, nothing sent", g, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if reused != 0 {
		t.Errorf("%d refresh tokens were sent again after the server rotated them", reused)
	}
}

// tokenFixture is a token endpoint answering refreshes as answer says.
type tokenFixture struct{ *httptest.Server }

func tokenServer(t *testing.T, answer func(w http.ResponseWriter, refresh string)) tokenFixture {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		answer(w, r.Form.Get("refresh_token"))
	}))
	t.Cleanup(srv.Close)
	return tokenFixture{srv}
}

// client is a client of the fixture's upstream, keeping what it holds in
// store.
func (f tokenFixture) client(store Store) *Client {
	return New(Options{Upstream: "crm", Resource: f.URL + "/mcp", Mode: ModeUser, HTTP: f.Client(), Store: store}, []byte("secret-0123456789"))
}

// grant is a grant of the fixture's, an hour long.
func (f tokenFixture) grant(access, refresh string) *grant {
	now := time.Now()
	return &grant{Access: access, Refresh: refresh, Issued: now, Expires: now.Add(time.Hour), Resource: f.URL + "/mcp", Token: f.URL + "/token",
		Reg: registration{ClientID: "m", AuthMethod: "none"}, Version: nextVersion(0)}
}

// refuse answers as RFC 6749 §5.2 has a token endpoint refuse.
func refuse(w http.ResponseWriter, code string) {
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, `{"error":%q}`, code)
}
