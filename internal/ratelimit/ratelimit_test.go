package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/redistest"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// take calls Allow n times and returns how many were allowed and the last
// refusal's wait.
func take(t *testing.T, l *Limiter, key string, n int) (allowed int, retryAfter time.Duration) {
	t.Helper()
	for range n {
		ok, after := l.Allow(context.Background(), key)
		if ok {
			allowed++
		} else {
			retryAfter = after
		}
	}
	return allowed, retryAfter
}

// A local bucket lets the burst through, then refuses with the wait until
// its next token, and serves again once that wait has passed; other keys
// are not charged. Time is the bubble's, so the waits are exact.
func TestLocalBucketRefusesPastItsBurstUntilItRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("principal", Limit{Rate: 2, Burst: 3}, Shared{})
		if got, after := take(t, l, "alice", 5); got != 3 || after != 500*time.Millisecond {
			t.Fatalf("5 at once at 2/s burst 3: %d allowed, last wait %v; want 3 and 500ms", got, after)
		}
		if got, _ := take(t, l, "bob", 3); got != 3 {
			t.Fatalf("bob was charged for alice: %d of 3 allowed", got)
		}
		time.Sleep(499 * time.Millisecond)
		if ok, after := l.Allow(context.Background(), "alice"); ok || after != time.Millisecond {
			t.Fatalf("1 ms before the token: allowed %v, wait %v", ok, after)
		}
		time.Sleep(time.Millisecond)
		if ok, _ := l.Allow(context.Background(), "alice"); !ok {
			t.Fatal("refused once the token was due")
		}
		time.Sleep(time.Minute) // a bucket saves no more than its burst
		if got, _ := take(t, l, "alice", 5); got != 3 {
			t.Fatalf("after a long idle: %d allowed, want the burst of 3", got)
		}
	})
}

// A flood of new keys makes the limiter drop buckets, but never one that is
// still owed tokens: a caller cannot shed its limit by making others' keys.
func TestAFloodOfKeysKeepsAnEmptiedBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New("principal", Limit{Rate: 1, Burst: 2}, Shared{})
		take(t, l, "alice", 2)
		for i := range maxLocalKeys - 1 { // alice and these fill the limiter
			l.Allow(context.Background(), fmt.Sprint("k", i))
		}
		time.Sleep(time.Second)                   // the flood's buckets are full again; alice is owed one
		l.Allow(context.Background(), "one more") // past the bound: a sweep
		l.mu.Lock()
		n := len(l.local)
		l.mu.Unlock()
		if n > maxLocalKeys/2 {
			t.Fatalf("%d buckets kept after the sweep, bound %d", n, maxLocalKeys)
		}
		if got, _ := take(t, l, "alice", 2); got != 1 {
			t.Fatalf("alice after the sweep: %d of 2 allowed, want 1 (her bucket kept)", got)
		}
	})
}

// Two replicas on one Redis share one bucket: what one spends, the other
// cannot, and the wait Redis computes is the time to the next token.
func TestReplicasShareOneBucketInRedis(t *testing.T) {
	rs := redistest.Start(t)
	a := New("principal", Limit{Rate: 1, Burst: 4}, Shared{Client: rs.Client(), Prefix: "t:"})
	b := New("principal", Limit{Rate: 1, Burst: 4}, Shared{Client: rs.Client(), Prefix: "t:"})
	if got, _ := take(t, a, "alice", 3); got != 3 {
		t.Fatalf("replica a: %d of 3 allowed", got)
	}
	got, after := take(t, b, "alice", 3)
	if got != 1 {
		t.Fatalf("replica b: %d of 3 allowed, want the 1 token a left", got)
	}
	if after <= 900*time.Millisecond || after > time.Second {
		t.Fatalf("wait for the next token: %v, want just under 1s", after)
	}
	if got, _ := take(t, b, "bob", 4); got != 4 {
		t.Fatalf("bob: %d of 4 allowed: he was charged for alice", got)
	}
	keys, err := rs.Client().Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("Redis keys: %v (%v), want one cell per caller", keys, err)
	}
	for _, k := range keys {
		if strings.Contains(k, "alice") || strings.Contains(k, "bob") {
			t.Fatalf("the key %q names the caller", k)
		}
	}
}

// When Redis stops answering, each replica limits on its own bucket instead
// of failing or waiting on every request; once the breaker has opened, a
// request costs no Redis timeout. When Redis is back, the shared count
// resumes after the breaker's cooldown.
func TestRedisDownFallsBackToALocalBucket(t *testing.T) {
	rs := redistest.Start(t)
	// The limiter bounds a call by its context: a client must honor it.
	cl := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cl.Close() })
	l := New("principal", Limit{Rate: 1, Burst: 3}, Shared{Client: cl, Timeout: 50 * time.Millisecond})
	take(t, l, "alice", 3) // the shared bucket is spent
	rs.Pause()
	got, after := take(t, l, "alice", 5)
	if got != 3 || after <= 0 {
		t.Fatalf("Redis paused: %d of 5 allowed (last wait %v), want the local burst of 3", got, after)
	}
	start := time.Now()
	take(t, l, "carol", 10)
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Fatalf("10 requests with the breaker open took %v: each waited on Redis", took)
	}
	rs.Resume()
	// The breaker probes Redis after its cooldown: from then on, a request
	// through l is counted where another replica sees it.
	other := New("principal", Limit{Rate: 1, Burst: 3}, Shared{Client: rs.Client()})
	i := 0
	eventually(t, 10*time.Second, func() error {
		i++
		key := fmt.Sprint("dave", i)
		l.Allow(context.Background(), key)
		if got, _ := take(t, other, key, 3); got != 3 {
			return nil
		}
		return fmt.Errorf("the other replica saw none of the requests through l")
	})
}

// eventually waits for a condition (testwait.Eventually).
var eventually = testwait.Eventually

func TestErrorTellsTheWaitInDataAndRetryAfterInWholeSeconds(t *testing.T) {
	e := Error("per principal", 1234*time.Millisecond)
	if e.Code != jsonrpc.CodeRateLimited {
		t.Errorf("code %d, want %d", e.Code, jsonrpc.CodeRateLimited)
	}
	var data struct{ RetryAfterMs int64 }
	if err := json.Unmarshal(e.Data, &data); err != nil || data.RetryAfterMs != 1234 {
		t.Errorf("data %s (%v), want retryAfterMs 1234", e.Data, err)
	}
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {59500 * time.Millisecond, 60}} {
		if got := RetryAfterSeconds(c.d); got != c.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}
