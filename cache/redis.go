package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/breaker"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/redisbus"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// redisTier is the shared tier, used by every replica. Every command is bounded
// by a short timeout and guarded by a circuit breaker: when Redis is slow or
// down, requests go on from memory and the upstreams, costing about what a
// miss costs, with nothing relaxed and no error shown to callers.
type redisTier struct {
	rdb      redis.UniversalClient
	bus      redisbus.Bus // the invalidation channel
	prefix   string
	timeout  time.Duration
	lifetime time.Duration // the longest an entry can live: generation keys outlive it
	brk      *breaker.Breaker
	log      *slog.Logger
	origin   string       // this replica, to skip its own invalidation messages
	sealer   *seal.Sealer // seals private bodies; nil: stored in clear
	rounds   rounds       // lookups' round trips, shared

	errors  atomic.Uint64
	dropped atomic.Uint64  // writes skipped because too many were in flight
	writes  chan struct{}  // bounds concurrent writes
	pending sync.WaitGroup // writes in flight, waited for on close

	// missed holds the upstreams whose invalidations could not reach
	// Redis; the next successful contact makes everything of theirs
	// written before it stale (raiseMissed).
	missedMu  sync.Mutex
	missed    map[string]bool
	anyMissed atomic.Bool // len(missed) > 0, read without the lock on every call
}

// maxWrites bounds the asynchronous writes in flight; beyond it a write is
// dropped (the entry stays in memory and is refilled later).
const maxWrites = 256

// quietRedis routes go-redis's own diagnostics (dial failures, pool
// warnings) to debug level: the breaker already reports an outage once.
type quietRedis struct{ log *slog.Logger }

func (q quietRedis) Printf(_ context.Context, format string, v ...any) {
	q.log.Debug("go-redis: " + fmt.Sprintf(format, v...))
}

var setRedisLogger sync.Once

func newRedisTier(o RedisOptions, lifetime time.Duration, log *slog.Logger, origin string) *redisTier {
	opts := o.Client
	opts.DialTimeout = max(o.Timeout, 250*time.Millisecond)
	opts.ReadTimeout = o.Timeout
	opts.WriteTimeout = o.Timeout
	opts.PoolTimeout = o.Timeout
	opts.MaxRetries = 1
	if opts.ClientName == "" {
		opts.ClientName = "manifold"
	}
	setRedisLogger.Do(func() { redis.SetLogger(quietRedis{log}) })
	rdb := redis.NewUniversalClient(&opts)
	s := &redisTier{
		rdb:      rdb,
		bus:      redisbus.Bus{Client: rdb, Options: &opts, Channel: o.Prefix + keyVersion + ":invalidate"},
		prefix:   o.Prefix,
		timeout:  o.Timeout,
		lifetime: lifetime,
		log:      log,
		origin:   origin,
		writes:   make(chan struct{}, maxWrites),
		rounds:   rounds{rdb: rdb, timeout: o.Timeout},
	}
	s.brk = breaker.New(o.BreakerFailures, o.BreakerCooldown, func(open bool) {
		if open {
			log.Warn("redis unavailable: serving from memory and upstreams until it recovers")
		} else {
			log.Info("redis recovered: shared cache back in use")
		}
	})
	s.rounds.failed = func() {
		s.errors.Add(1)
		s.brk.Failure()
	}
	return s
}

// call runs f under the tier's timeout and the breaker. It reports false
// when Redis was not asked or failed.
func (s *redisTier) call(ctx context.Context, f func(ctx context.Context) error) bool {
	if !s.brk.Allow() {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.raiseMissed(cctx); err != nil {
		s.errors.Add(1)
		s.brk.Failure()
		return false
	}
	err := f(cctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		var shared sharedFailure
		if ctx.Err() != nil || errors.As(err, &shared) {
			// The caller left, which says nothing about Redis; or its
			// round trip failed, which counted itself (rounds.failed).
			s.brk.Abandon()
			return false
		}
		s.errors.Add(1)
		s.brk.Failure()
		return false
	}
	s.brk.Success()
	return true
}

// found is a lookup's answer for one key.
type found struct {
	hdr  redisHeader
	body []byte
	pttl time.Duration
	// age is how long ago the entry was written, and revalidate whether
	// that was before its upstream's revalidate-before time (both by
	// Redis's clock): such an entry is stale, usable only if the upstream
	// cannot be reached.
	age        time.Duration
	revalidate bool
}

// lookup reads the private and public candidates of one request and the
// current generation of their tag, in one pipelined round trip, shared
// with the lookups that arrive with it (rounds), as are the reads they
// have in common.
func (s *redisTier) lookup(ctx context.Context, keys []string, upstream, th string) (hits []*found, gen generation, ok bool) {
	ok = s.call(ctx, func(ctx context.Context) error {
		var trip *round
		var g, rb *redis.StringCmd
		var now *redis.TimeCmd
		err := s.rounds.do(ctx, func(rd *round) {
			trip = rd
			for _, k := range keys {
				rd.Get(ctx, k)
				rd.PTTL(ctx, k)
			}
			g = rd.Get(ctx, genKey(s.prefix, upstream, th))
			rb = rd.Get(ctx, revalidateKey(s.prefix, upstream))
			now = rd.Time(ctx)
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		gen = generation{Tag: parseGen(g)}
		rbMs, nowMs := int64(parseGen(rb)), now.Val().UnixMilli()
		hits = make([]*found, len(keys))
		for i, k := range keys {
			hits[i] = trip.decoded(k, func() *found { return s.decode(trip.gets[k], trip.pttls[k], nowMs, rbMs) })
		}
		return nil
	})
	return hits, gen, ok
}

// decode reads one key's reply, nil for a miss: an entry absent, expiring,
// malformed, or sealed where this replica cannot open it (or in clear where
// it seals).
func (s *redisTier) decode(v *redis.StringCmd, t *redis.DurationCmd, nowMs, rbMs int64) *found {
	b, err := v.Bytes()
	if err != nil {
		return nil
	}
	pttl, err := t.Result()
	if err != nil || pttl <= 0 {
		return nil
	}
	hdr, body, err := decodeRedis(b)
	switch {
	case err != nil:
	case hdr.Sealed:
		body, err = s.unseal(hdr, body)
	case s.sealer != nil && hdr.Scope == mcp.ScopePrivate:
		// Sealing is the promise for every private entry: one in clear was
		// written by a replica that does not seal, or by someone with no
		// business writing it.
		err = seal.ErrNotOpen
	}
	if err != nil {
		return nil
	}
	age := time.Duration(hdr.FreshMs+hdr.GraceMs+hdr.LagMs)*time.Millisecond - pttl
	return &found{hdr: hdr, body: body, pttl: pttl, age: age, revalidate: nowMs-age.Milliseconds() <= rbMs}
}

// unseal opens a sealed body; a replica that does not seal cannot, and
// takes the entry for a miss.
func (s *redisTier) unseal(hdr redisHeader, body []byte) ([]byte, error) {
	if s.sealer == nil {
		return nil, seal.ErrNotOpen
	}
	return s.sealer.Open(hdr.FP, hdr.Key, body)
}

func parseGen(c *redis.StringCmd) uint64 {
	v, err := c.Result()
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

// write stores e asynchronously for ttl (its fresh time plus grace, the
// stale-if-error time, which the value records). Redis's own expiry then
// tells every replica the remaining time, whatever their clocks.
//
// A fill lease *ls is taken over (and *ls cleared): it is released after
// the write, so that waiting replicas find the entry, and marked open
// instead when the entry is private (theirs is not this one) or the write
// failed.
func (s *redisTier) write(e *entry, fresh, grace, lag time.Duration, ls *lease) {
	if fresh < time.Millisecond {
		return
	}
	select {
	case s.writes <- struct{}{}:
		s.pending.Add(1)
	default:
		s.dropped.Add(1)
		return
	}
	held := *ls
	*ls = lease{}
	go func() {
		defer func() { <-s.writes; s.pending.Done() }()
		ctx := context.Background()
		val, err := s.encode(e, fresh, grace, lag)
		stored := err == nil && s.call(ctx, func(ctx context.Context) error {
			return s.rdb.Set(ctx, e.key, val, fresh+grace).Err()
		})
		s.release(ctx, held, stored && e.scope == mcp.ScopePublic)
	}()
}

// encode is e's value in Redis, its body sealed when it is private and the
// tier seals (in the write's goroutine: the caller has its answer already).
func (s *redisTier) encode(e *entry, fresh, grace, lag time.Duration) ([]byte, error) {
	if s.sealer == nil || e.scope != mcp.ScopePrivate {
		return encodeRedis(e, e.body, false, fresh, grace, lag), nil
	}
	sealed, err := s.sealer.Seal(e.fp, e.key, e.body)
	if err != nil {
		return nil, err
	}
	return encodeRedis(e, sealed, true, fresh, grace, lag), nil
}

// invalidation is what replicas tell each other: a tag of an upstream
// (TagHash set), or an upstream's entries made stale (Revalidate).
type invalidation struct {
	Origin   string `json:"o"`
	Upstream string `json:"u,omitempty"`
	TagHash  string `json:"t,omitempty"`
	// Revalidate: the upstream's entries written so far are stale, not
	// gone (changes may have been missed).
	Revalidate bool `json:"r,omitempty"`
}

// revalidateScript moves an upstream's revalidate-before time to Redis's
// now, never back: replicas that each saw the same drop move it to about
// the same time, which is one raise, not one wipe per replica.
var revalidateScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if now > cur then redis.call('SET', KEYS[1], now, 'PX', ARGV[1]) end
return now`)

// revalidate makes the upstream's shared entries written so far stale and
// tells the other replicas.
func (s *redisTier) revalidate(ctx context.Context, upstream string) {
	s.call(ctx, func(ctx context.Context) error { return s.markStale(ctx, upstream) })
}

func (s *redisTier) markStale(ctx context.Context, upstream string) error {
	if err := revalidateScript.Run(ctx, s.rdb, []string{revalidateKey(s.prefix, upstream)}, s.lifetime.Milliseconds()).Err(); err != nil {
		return err
	}
	msg, _ := json.Marshal(invalidation{Origin: s.origin, Upstream: upstream, Revalidate: true})
	return s.rdb.Publish(ctx, s.bus.Channel, msg).Err()
}

// invalidate raises the shared generation of a tag and tells the other
// replicas. It reports false when
// Redis could not be reached, which is remembered (see missed).
func (s *redisTier) invalidate(ctx context.Context, upstream, th string) bool {
	ok := s.call(ctx, func(ctx context.Context) error {
		key := genKey(s.prefix, upstream, th)
		pipe := s.rdb.Pipeline()
		pipe.Incr(ctx, key)
		pipe.PExpire(ctx, key, s.lifetime)
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		msg, _ := json.Marshal(invalidation{Origin: s.origin, Upstream: upstream, TagHash: th})
		return s.rdb.Publish(ctx, s.bus.Channel, msg).Err()
	})
	if !ok {
		s.missedMu.Lock()
		if s.missed == nil {
			s.missed = map[string]bool{}
		}
		s.missed[upstream] = true
		s.anyMissed.Store(true)
		s.missedMu.Unlock()
	}
	return ok
}

// raiseMissed makes stale, as revalidate does, the shared entries of every
// upstream whose invalidations could not be delivered while Redis was
// away, and tells the other replicas: what they cached of it before now
// may be out of date, so none of it is fresh, yet all of it may still stand
// in for the upstream if it cannot be reached.
func (s *redisTier) raiseMissed(ctx context.Context) error {
	if !s.anyMissed.Load() {
		return nil
	}
	s.missedMu.Lock()
	defer s.missedMu.Unlock()
	for upstream := range s.missed {
		if err := s.markStale(ctx, upstream); err != nil {
			return err
		}
		delete(s.missed, upstream)
		s.anyMissed.Store(len(s.missed) > 0)
		s.log.Info("redis: invalidations were missed while it was unreachable; the upstream's entries cached before now are stale", "upstream", upstream)
	}
	return nil
}

// listen delivers other replicas' invalidations to apply, and calls lost
// after the subscription was re-established (messages may have been missed
// in between), until ctx is done.
func (s *redisTier) listen(ctx context.Context, apply func(invalidation), lost func()) {
	s.bus.Listen(ctx, func(payload string) {
		var inv invalidation
		if json.Unmarshal([]byte(payload), &inv) == nil && inv.Origin != s.origin {
			apply(inv)
		}
	}, func() {
		lost()
		s.log.Warn("redis invalidation channel re-established; entries cached before now are stale until refilled (still served while their upstream is unreachable)")
	})
}

// heartbeatEvery is how often an idle replica asks Redis whether it is
// there. One PING a second costs nothing, and it keeps the breaker, its two
// log lines and the admin page true while only memory hits flow: without
// it, a loss would go unnoticed (and a recovery unlogged) until a miss.
const heartbeatEvery = time.Second

// heartbeat PINGs Redis through the breaker every interval until ctx is
// done. An open breaker lets one probe through per cooldown, as for any
// caller.
func (s *redisTier) heartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.call(ctx, func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() })
		}
	}
}

// close waits for the writes in flight (each bounded by the timeout) and
// releases the client.
func (s *redisTier) close() error {
	s.pending.Wait()
	return s.rdb.Close()
}
