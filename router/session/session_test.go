package session

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
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
			a.Receive(func(id string, m *jsonrpc.Message) { received <- id + " " + string(m.ID) })
			if err := b.Send(ctx, s.ID, &jsonrpc.Message{JSONRPC: "2.0", ID: json.RawMessage(`"q1"`), Result: json.RawMessage(`{}`)}); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-received:
				if r != s.ID+` "q1"` {
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
	ctx := context.Background()
	a, b := &Session{ID: NewID()}, &Session{ID: NewID()}
	for _, s := range []*Session{a, b} {
		if err := m.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Create(ctx, &Session{ID: NewID()}); !errors.Is(err, ErrFull) {
		t.Errorf("a third session past the bound of 2: %v", err)
	}
	events, stop := m.Watch(a.ID)
	defer stop()
	for i := 0; i < 5; i++ { // b is used, a is not
		time.Sleep(80 * time.Millisecond)
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
