package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func event(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return Event{}
	}
}

// Both stores, and two Redis stores as two replicas: a session created on
// one is found on the other; a change made on one reaches a watcher on the
// other; a message sent for a session reaches every replica's handler; a
// deleted session is unknown everywhere and its watchers are told.
func TestStores(t *testing.T) {
	rs := redistest.Start(t)
	ro, _ := redis.ParseURL(rs.URL())
	newRedis := func() Store {
		s := NewRedis(RedisOptions{Client: redis.UniversalOptions{Addrs: []string{ro.Addr}}, Prefix: "t:", Idle: time.Minute, Timeout: time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	mem := NewMemory(time.Minute, 10)
	t.Cleanup(func() { _ = mem.Close() })
	for name, pair := range map[string][2]Store{"memory": {mem, mem}, "redis": {newRedis(), newRedis()}} {
		t.Run(name, func(t *testing.T) {
			a, b := pair[0], pair[1]
			ctx := context.Background()
			s := &Session{ID: NewID(), Version: "2025-11-25", ClientCapabilities: json.RawMessage(`{"sampling":{}}`)}
			if err := a.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
			events, stop := a.Watch(s.ID)
			defer stop()
			got, err := b.Get(ctx, s.ID)
			if err != nil || got.Version != s.Version || string(got.ClientCapabilities) != `{"sampling":{}}` {
				t.Fatalf("Get on the other: %+v %v", got, err)
			}
			got.Subscriptions = []string{"x://a"}
			if err := b.Update(ctx, got); err != nil {
				t.Fatal(err)
			}
			if ev := event(t, events); !ev.Changed {
				t.Errorf("event %+v, want Changed", ev)
			}
			if again, _ := a.Get(ctx, s.ID); len(again.Subscriptions) != 1 {
				t.Errorf("the change is not seen: %+v", again)
			}
			received := make(chan string, 2)
			a.Receive(func(id string, dir Direction, m []byte) { received <- fmt.Sprintf("%s %d %s", id, dir, m) })
			if err := b.Send(ctx, s.ID, ToCaller, []byte(`{"jsonrpc":"2.0","id":"q1","result":{}}`)); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-received:
				if r != s.ID+` 2 {"jsonrpc":"2.0","id":"q1","result":{}}` {
					t.Errorf("received %q", r)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a message sent on one replica did not reach the other")
			}
			if err := b.Delete(ctx, s.ID); err != nil {
				t.Fatal(err)
			}
			if ev := event(t, events); !ev.Ended {
				t.Errorf("event %+v, want Ended", ev)
			}
			if _, err := a.Get(ctx, s.ID); !errors.Is(err, ErrUnknown) {
				t.Errorf("a deleted session: %v", err)
			}
			if err := a.Update(ctx, s); !errors.Is(err, ErrUnknown) {
				t.Errorf("an update brought a deleted session back: %v", err)
			}
		})
	}
}

// The memory store's sessions expire unused, watchers are told, and the
// bound holds.
func TestMemoryExpiryAndBound(t *testing.T) {
	m := NewMemory(200*time.Millisecond, 2)
	defer m.Close()
	// The store's clock is the test's: time passes when the test says.
	// (The sweep still ticks in real time, every idle/4, and asks it.)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	m.mu.Lock()
	m.now = func() time.Time { return time.Unix(0, clock.Load()) }
	m.mu.Unlock()
	ctx := context.Background()
	a, b := &Session{ID: NewID()}, &Session{ID: NewID()}
	for _, s := range []*Session{a, b} {
		if err := m.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	var full *FullError
	if err := m.Create(ctx, &Session{ID: NewID()}); !errors.As(err, &full) || full.Share {
		t.Errorf("a third session past the bound of 2: %v", err)
	}
	events, stop := m.Watch(a.ID)
	defer stop()
	for i := 0; i < 5; i++ { // b is used, a is not
		clock.Add(int64(80 * time.Millisecond))
		if _, err := m.Get(ctx, b.ID); err != nil {
			t.Fatalf("a session in use expired: %v", err)
		}
	}
	if _, err := m.Get(ctx, a.ID); !errors.Is(err, ErrUnknown) {
		t.Errorf("an unused session lived: %v", err)
	}
	if ev := event(t, events); !ev.Ended {
		t.Errorf("event %+v, want Ended", ev)
	}
	if m.Len() != 1 {
		t.Errorf("Len %d", m.Len())
	}
}

// Both stores bound the sessions of one share and of all, the share's
// first; a deletion or an expiry gives a place back. The Redis stores are
// two replicas and hold the bounds together, also on a Cluster, where
// every key of the scripts must be on one node.
func TestStoreLimits(t *testing.T) {
	limits := Limits{Max: 3, PerShare: 2}
	idle := 400 * time.Millisecond
	rs := redistest.Start(t)
	cluster := redistest.StartCluster(t)
	newRedis := func(o redis.UniversalOptions) Store {
		s := NewRedis(RedisOptions{Client: o, Prefix: "t:", Idle: idle, Limits: limits, Timeout: 2 * time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ro, _ := redis.ParseURL(rs.URL())
	mem := NewMemoryLimited(idle, limits)
	t.Cleanup(func() { _ = mem.Close() })
	for name, pair := range map[string][2]Store{
		"memory":  {mem, mem},
		"redis":   {newRedis(redis.UniversalOptions{Addrs: []string{ro.Addr}}), newRedis(redis.UniversalOptions{Addrs: []string{ro.Addr}})},
		"cluster": {newRedis(redis.UniversalOptions{Addrs: cluster.Addrs, IsClusterMode: true}), newRedis(redis.UniversalOptions{Addrs: cluster.Addrs, IsClusterMode: true})},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := pair[0], pair[1]
			ctx := context.Background()
			open := func(st Store, share string) (*Session, error) {
				s := &Session{ID: NewID(), Version: "2025-11-25", Share: share}
				return s, st.Create(ctx, s)
			}
			alice1, err := open(a, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := open(b, "alice"); err != nil {
				t.Fatal(err)
			}
			var full *FullError
			if _, err := open(a, "alice"); !errors.As(err, &full) || !full.Share || full.Limit != 2 {
				t.Fatalf("alice's third session: %v, want her share refused", err)
			}
			bob, err := open(b, "bob")
			if err != nil {
				t.Fatalf("bob's first session: %v", err)
			}
			if _, err := open(a, "carol"); !errors.As(err, &full) || full.Share || full.Limit != 3 {
				t.Fatalf("a fourth session: %v, want the store full", err)
			}
			if n := a.Len(); n != 3 {
				t.Errorf("Len %d, want 3", n)
			}
			if err := b.Delete(ctx, alice1.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := open(a, "alice"); err != nil {
				t.Fatalf("alice after ending one: %v", err)
			}
			// Only bob's session is used: the others expire, and count no
			// more, nor does bob's once he stops. (Real time must pass:
			// Redis counts the idle time by its own clock.)
			deadline := time.Now().Add(5 * time.Second)
			// openOnce the others expire opens a session of who in s, until
			// the deadline; bob's first session is used meanwhile.
			openOnce := func(s Store, who, what string) {
				for {
					if _, err := b.Get(ctx, bob.ID); err != nil {
						t.Fatalf("a session in use expired: %v", err)
					}
					_, err := open(s, who)
					if err == nil {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: %v", what, err)
					}
					time.Sleep(idle / 8)
				}
			}
			openOnce(a, "carol", "carol after the others expired")
			// Carol may have found room as the second of the others
			// expired, before the third: bob's room comes with the third.
			openOnce(b, "bob", "bob's second session")
			if _, err := open(a, "bob"); !errors.As(err, &full) || !full.Share {
				t.Fatalf("bob's third session: %v, want his share refused (his first is alive)", err)
			}
		})
	}
}

// Both stores count as active only the sessions used lately, and every
// session until it expires: a client that left without DELETE stops
// counting as active long before its session is gone. Measured on the
// stores' own clocks (the Redis server's), with a window the test can wait
// out.
func TestStoresActive(t *testing.T) {
	rs := redistest.Start(t)
	ro, _ := redis.ParseURL(rs.URL())
	red := NewRedis(RedisOptions{Client: redis.UniversalOptions{Addrs: []string{ro.Addr}}, Prefix: "act:", Idle: time.Minute, Timeout: time.Second})
	t.Cleanup(func() { _ = red.Close() })
	mem := NewMemory(time.Minute, 10)
	t.Cleanup(func() { _ = mem.Close() })
	for name, st := range map[string]Store{"memory": mem, "redis": red} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			idle, used := &Session{ID: NewID()}, &Session{ID: NewID()}
			for _, s := range []*Session{idle, used} {
				if err := st.Create(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			if n := st.Active(time.Second); n != 2 {
				t.Fatalf("%d active just after creation, want 2", n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for st.Active(time.Second) != 1 {
				// used is used, idle is not, until only used counts.
				if err := st.Update(ctx, used); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d active after 10 s, want 1", st.Active(time.Second))
				}
				time.Sleep(100 * time.Millisecond)
			}
			if n := st.Len(); n != 2 {
				t.Errorf("Len %d: the idle session is still held until it expires", n)
			}
		})
	}
}

// A session not yet initialized is not kept as a recent copy. Its one
// change, initialize, is answered on the session's stream, which the
// replica that made the change may hold: the caller can then send its next
// request to another replica before the change's signal has reached it,
// and a copy kept there would refuse it as not initialized. Here b reads
// each new session, a initializes it, and b reads it again at once.
func TestUninitializedSessionIsNotKept(t *testing.T) {
	rs := redistest.Start(t)
	ro, _ := redis.ParseURL(rs.URL())
	replica := func() *Redis {
		s := NewRedis(RedisOptions{Client: redis.UniversalOptions{Addrs: []string{ro.Addr}}, Prefix: "init:", Idle: time.Minute, Timeout: 2 * time.Second})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := replica(), replica()
	ctx := context.Background()
	stale := 0
	for range 100 {
		s := &Session{ID: NewID()}
		if err := a.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Get(ctx, s.ID); err != nil { // a request before initialize
			t.Fatal(err)
		}
		s.Version = "2024-11-05"
		if err := a.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Get(ctx, s.ID); err != nil || got.Version != s.Version {
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("right after initialize, the other replica saw the session uninitialized in %d of 100 rounds", stale)
	}
}

// A session past its idle timeout is not counted, held or in use, though
// the sweep has not removed it yet: the figures count live sessions only.
func TestMemoryCountsLiveSessions(t *testing.T) {
	m := NewMemory(time.Hour, 10) // the sweep ticks each minute: not within this test
	defer m.Close()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	m.mu.Lock()
	m.now = func() time.Time { return time.Unix(0, clock.Load()) }
	m.mu.Unlock()
	ctx := context.Background()
	for range 3 {
		if err := m.Create(ctx, &Session{ID: NewID()}); err != nil {
			t.Fatal(err)
		}
	}
	if held, active := m.Len(), m.Active(time.Minute); held != 3 || active != 3 {
		t.Fatalf("just created: held %d, in use %d; want 3 and 3", held, active)
	}
	clock.Add(int64(time.Hour + time.Second))
	if held, active := m.Len(), m.Active(time.Minute); held != 0 || active != 0 {
		t.Errorf("past their idle timeout: held %d, in use %d; want 0 and 0", held, active)
	}
}
