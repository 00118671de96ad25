package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// lookupTrips counts the round trips that carry lookups (pipelines that
// read entries), holding the first until holdFor lookups wait behind it.
type lookupTrips struct {
	trips   atomic.Int64
	holdFor func() bool
	cmds    []int // the commands each round trip carried
	mu      sync.Mutex
}

func (h *lookupTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lookupTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *lookupTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "get" {
			h.mu.Lock()
			h.cmds = append(h.cmds, len(cmds))
			h.mu.Unlock()
			if h.trips.Add(1) == 1 {
				deadline := time.Now().Add(5 * time.Second)
				for !h.holdFor() && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
		}
		return next(ctx, cmds)
	}
}

// holdUntilQueued holds c's first lookup round trip until n lookups wait
// behind it, and counts the round trips.
func holdUntilQueued(c *Cache, n int) *lookupTrips {
	trips := &lookupTrips{holdFor: func() bool {
		c.redis.rounds.mu.Lock()
		defer c.redis.rounds.mu.Unlock()
		return len(c.redis.rounds.queue) == n
	}}
	c.redis.rdb.AddHook(trips)
	return trips
}

// Lookups that arrive while a round trip is under way share the next one:
// 32 concurrent Redis hits take 2 round trips, not 32, and each caller
// gets its own entry.
func TestConcurrentLookupsShareRoundTrips(t *testing.T) {
	rs := redistest.Start(t)
	a := newCache(t, testOptions(rs.URL()), nil)
	const n = 32
	up := &upstream{ttlMs: 60_000, scope: "public"}
	want := make([]string, n)
	for i := range n {
		r := read(fmt.Sprintf("test://shared/%d", i), "")
		want[i], _, _ = get(t, a, r, up.fill(r))
	}
	a.redis.pending.Wait()

	o := testOptions(rs.URL())
	o.MemoryBytes = 0 // every read below is a Redis lookup
	b := newCache(t, o, nil)
	trips := holdUntilQueued(b, n-1)
	other := &upstream{ttlMs: 60_000, scope: "public"}
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := read(fmt.Sprintf("test://shared/%d", i), "")
			got[i], _, _ = get(t, b, r, other.fill(r))
		})
	}
	wg.Wait()
	if calls := other.calls.Load(); calls != 0 {
		t.Errorf("%d lookups missed Redis and asked the upstream", calls)
	}
	for i := range n {
		if got[i] != want[i] {
			t.Errorf("lookup %d got %q, want %q", i, got[i], want[i])
		}
	}
	if tr := trips.trips.Load(); tr != 2 {
		t.Errorf("%d concurrent lookups took %d round trips, want 2 (the first, then all that queued behind it)", n, tr)
	}
}

// A caller that gives up while its lookup waits for a round trip leaves
// at once, and the round trip still serves the others; it is not a Redis
// failure.
func TestLookupWaitEndsWithItsCaller(t *testing.T) {
	rs := redistest.Start(t)
	c := newCache(t, testOptions(rs.URL()), nil)
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	held := &lookupTrips{holdFor: func() bool {
		select {
		case <-release:
			return true
		default:
			return false
		}
	}}
	c.redis.rdb.AddHook(held)
	var first sync.WaitGroup
	first.Go(func() { // leads a round trip that the hook holds
		_, _, ok := c.redis.lookup(context.Background(), []string{"k1"}, "up", "t1")
		if !ok {
			t.Error("the held round trip failed")
		}
	})
	for held.trips.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan bool)
	go func() {
		_, _, ok := c.redis.lookup(ctx, []string{"k2"}, "up", "t2")
		done <- ok
	}()
	cancel()
	select {
	case ok := <-done:
		if ok {
			t.Error("a lookup whose caller left reported success")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a lookup whose caller left still waits for a round trip")
	}
	close(release)
	first.Wait()
	if c.redis.brk.Open() || c.redis.errors.Load() != 0 {
		t.Errorf("a caller leaving counted as a Redis failure: %d errors", c.redis.errors.Load())
	}
}

// Lookups of one hot entry that share a round trip read it once: 32
// concurrent reads of one URI send its reads and the generation, the
// revalidate-before time and the clock once in the round trip that
// carries 31 of them (7 commands, not 217), and each still gets the entry.
func TestHotEntryReadOncePerRound(t *testing.T) {
	rs := redistest.Start(t)
	a := newCache(t, testOptions(rs.URL()), nil)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	r := read("test://hot", "")
	want, _, _ := get(t, a, r, up.fill(r))
	a.redis.pending.Wait()

	o := testOptions(rs.URL())
	o.MemoryBytes = 0
	b := newCache(t, o, nil)
	const n = 32
	trips := holdUntilQueued(b, n-1)
	other := &upstream{ttlMs: 60_000, scope: "public"}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r := read("test://hot", "")
			if got, _, _ := get(t, b, r, other.fill(r)); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
	wg.Wait()
	if calls := other.calls.Load(); calls != 0 {
		t.Errorf("%d lookups missed Redis", calls)
	}
	trips.mu.Lock()
	defer trips.mu.Unlock()
	if len(trips.cmds) != 2 || trips.cmds[1] != 7 {
		t.Errorf("round trips carried %v commands, want [7 7]: one lookup's reads, then 31 lookups' reads sent once", trips.cmds)
	}
}

// A failed round trip is one failure however many lookups it carried:
// Redis dies while 32 lookups wait on two round trips, which is two
// failures to the breaker (it opens after 5) and the error count, not 32;
// once Redis is back, lookups succeed again; when it fails again, lone
// lookups fail and the breaker opens at its threshold.
func TestFailedRoundTripCountsOnce(t *testing.T) {
	rs := redistest.Start(t)
	o := testOptions(rs.URL())
	o.Redis.BreakerFailures = 5
	c := newCache(t, o, nil)
	const n = 32
	trips := &lookupTrips{holdFor: func() bool {
		c.redis.rounds.mu.Lock()
		queued := len(c.redis.rounds.queue)
		c.redis.rounds.mu.Unlock()
		if queued == n-1 {
			rs.Stop()
			return true
		}
		return false
	}}
	c.redis.rdb.AddHook(trips)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, _, ok := c.redis.lookup(context.Background(), []string{fmt.Sprint("k", i)}, "up", "t"); !ok {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != n {
		t.Errorf("%d of %d lookups failed with Redis down", failed.Load(), n)
	}
	// The lookups gave up at their timeout; the second round trip ends at
	// its own, a little later.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		c.redis.rounds.mu.Lock()
		running := c.redis.rounds.running
		c.redis.rounds.mu.Unlock()
		if !running {
			break
		}
	}
	if got := c.redis.errors.Load(); got != 2 {
		t.Errorf("two failed round trips counted %d Redis errors, want 2", got)
	}
	if c.redis.brk.Open() {
		t.Error("two failed round trips opened a breaker that opens after 5 failures")
	}
	rs.Restart()
	if _, _, ok := c.redis.lookup(context.Background(), []string{"k0"}, "up", "t"); !ok {
		t.Error("a lookup failed after Redis came back")
	}
	// Down again: lone lookups fail one round trip each, and the breaker
	// (its count reset by the recovery) opens at its threshold.
	rs.Stop()
	for range o.Redis.BreakerFailures {
		if _, _, ok := c.redis.lookup(context.Background(), []string{"k0"}, "up", "t"); ok {
			t.Error("a lookup succeeded with Redis down again")
		}
	}
	if !c.redis.brk.Open() {
		t.Errorf("after a second outage of %d failed lookups the breaker is closed (%d Redis errors)", o.Redis.BreakerFailures, c.redis.errors.Load())
	}
}
