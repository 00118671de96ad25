// Package ratelimit bounds how often one key (a principal, an upstream)
// may be served.
//
// Each key has a token bucket: Rate tokens a second, at most Burst saved.
// With Redis, the bucket is shared by every replica: a GCRA cell in Redis
// (github.com/go-redis/redis_rate, one Lua call per request, keyed by a
// digest of the key), so a principal spread over replicas by a load balancer
// gets Rate in all, not Rate per replica. When Redis fails or is slow (a
// breaker opens after a run of failures), each replica falls back to a
// bucket of its own (golang.org/x/time/rate): the limit holds per replica
// instead of failing every request, and the shared count resumes when Redis
// answers again.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/manifold-mcp/manifold/internal/breaker"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// Limit is a rate in requests per second and the burst above it.
type Limit struct {
	Rate  float64
	Burst int
}

// maxLocalKeys bounds the local buckets; beyond it, buckets that have
// refilled (which a new bucket would equal) are dropped first.
const maxLocalKeys = 100_000

// Limiter is safe for concurrent use.
type Limiter struct {
	limit   Limit
	name    string // the Redis key's scope: principal, upstream
	shared  *redis_rate.Limiter
	prefix  string
	timeout time.Duration
	brk     *breaker.Breaker

	mu    sync.Mutex
	local map[string]*rate.Limiter
}

// Shared configures the Redis bucket; a nil Client means local only.
// Timeout bounds a call through its context: the Client must honour
// context deadlines (go-redis's ContextTimeoutEnabled).
type Shared struct {
	Client  redis.UniversalClient
	Prefix  string
	Timeout time.Duration
}

// New returns a limiter of lim for keys of one kind (name), shared through
// s.Client when it is set.
func New(name string, lim Limit, s Shared) *Limiter {
	l := &Limiter{limit: lim, name: name, local: map[string]*rate.Limiter{}, prefix: s.Prefix, timeout: s.Timeout}
	if s.Client != nil {
		l.shared = redis_rate.NewLimiter(s.Client)
		l.brk = breaker.New(3, 5*time.Second, nil)
		if l.timeout <= 0 {
			l.timeout = 100 * time.Millisecond
		}
	}
	return l
}

// Allow takes one token of key's bucket, or reports how long until one is
// there.
func (l *Limiter) Allow(ctx context.Context, key string) (ok bool, retryAfter time.Duration) {
	if l.shared != nil && l.brk.Allow() {
		ok, retryAfter, err := l.allowShared(ctx, key)
		if err == nil {
			l.brk.Success()
			return ok, retryAfter
		}
		l.brk.Failure()
	}
	return l.allowLocal(key)
}

func (l *Limiter) allowShared(ctx context.Context, key string) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	sum := sha256.Sum256([]byte(key))
	// The braces make the key one Redis Cluster slot of its own.
	rk := l.prefix + "rl:{" + l.name + ":" + hex.EncodeToString(sum[:12]) + "}"
	res, err := l.shared.Allow(ctx, rk, l.gcra())
	if err != nil {
		return false, 0, err
	}
	return res.Allowed > 0, max(res.RetryAfter, 0), nil
}

// gcra expresses the limit as redis_rate's integer rate per period: one
// request per emission interval.
func (l *Limiter) gcra() redis_rate.Limit {
	period := time.Duration(float64(time.Second) / l.limit.Rate)
	return redis_rate.Limit{Rate: 1, Period: max(period, time.Microsecond), Burst: l.limit.Burst}
}

func (l *Limiter) allowLocal(key string) (bool, time.Duration) {
	l.mu.Lock()
	b := l.local[key]
	if b == nil {
		if len(l.local) >= maxLocalKeys {
			l.sweep()
		}
		b = rate.NewLimiter(rate.Limit(l.limit.Rate), l.limit.Burst)
		l.local[key] = b
	}
	l.mu.Unlock()
	r := b.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return false, d
	}
	return true, 0
}

// sweep drops the buckets that are full again (a new one would be the
// same), and if none is, an arbitrary half. Called with mu held.
func (l *Limiter) sweep() {
	now := time.Now()
	for k, b := range l.local {
		if b.TokensAt(now) >= float64(l.limit.Burst) {
			delete(l.local, k)
		}
	}
	for k := range l.local {
		if len(l.local) < maxLocalKeys/2 {
			break
		}
		delete(l.local, k)
	}
}

// Error is the JSON-RPC error of a request over its limit.
func Error(what string, retryAfter time.Duration) *jsonrpc.Error {
	return jsonrpc.Errorf(jsonrpc.CodeRateLimited, "rate limit exceeded (%s): retry after %s", what, retryAfter.Round(time.Millisecond)).
		WithData(map[string]any{"retryAfterMs": retryAfter.Milliseconds()})
}

// RetryAfterSeconds is retryAfter as the Retry-After header writes it: whole
// seconds, at least 1.
func RetryAfterSeconds(retryAfter time.Duration) int {
	return max(1, int(math.Ceil(retryAfter.Seconds())))
}
