// Package cache is Manifold's two-tier response cache, which honours the
// MCP cache hints ttlMs and cacheScope (SEP-2549).
//
// A request is looked up in the memory tier (ristretto, in process), then in
// the shared tier (Redis, one pipelined round trip for both scopes and the
// invalidation generation), and only then filled from the upstream. Each
// upstream page or read is its own entry. Its key names the upstream, the
// scope, for a private entry the caller's credential fingerprint (an HMAC of
// the authorization headers, never the credential), the method and a digest
// of every parameter that can change the answer; the entry carries the same
// identity inside, checked on every read. A missing or unknown scope is
// private, and a private entry is never served to another credential: not
// from either tier, not through a collapsed fill, not stale.
//
// Freshness is the upstream's ttlMs, counted from when the answer arrived;
// every answer served carries the time that remains (the shared tier counts it
// with Redis's own expiry, so replicas' clocks do not matter). When an upstream
// cannot be reached, an entry up to stale_if_error past its freshness is
// served with ttlMs 0. Concurrent misses for one key make one upstream call.
//
// Invalidation works by generation rather than by search: each entry belongs
// to a tag (a resource URI, or an upstream's lists) and is valid only under
// the tag's generation when its fill began. Invalidating a tag raises its
// generation, here and in Redis, and tells the other replicas over pub/sub;
// every entry of the tag, in every scope and for every credential, becomes
// unreachable at once, and a fill racing the invalidation lands unreachable.
package cache

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/mcptrace"
	"github.com/manifold-mcp/manifold/internal/redisbus"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// Request is one upstream call to answer from the cache.
type Request struct {
	// Upstream names the server the call goes to.
	Upstream string
	// Tag groups entries that one notification invalidates together: the
	// resource URI of a read, a list tag (mcp.TagResourceLists, ...) for
	// an upstream's lists.
	Tag string
	// EraChanges counts the upstream's changes of protocol revision: an
	// answer translated from another era is another entry.
	EraChanges uint64
	// Req is the request as it goes upstream (params in the upstream's own
	// view).
	Req *mcp.Request
	// Method, if set, is Req's row of the method table, which the caller
	// looked up already; else the cache looks it up.
	Method *mcp.Method
	// Forwarded names the caller headers passed on to the upstream: they
	// can change its answer, so they are part of the key.
	Forwarded []string
	// Principal, when set, keys the caller's private entries instead of
	// its credential headers: it names the caller across token refreshes.
	// Set it only when the upstream cannot answer per token.
	Principal string
	// Served, if set, is told where the answer came from: TierMemory,
	// TierRedis, TierFill, TierStale, or TierUpstream (not cacheable).
	Served func(tier string)
	// Age, if set, is told how old the entry that answered is, when one
	// did (memory, Redis, stale).
	Age func(time.Duration)
	// Policy makes a request the method table does not cache cacheable,
	// under the operator's terms (policy.go).
	Policy *Policy
	// Prepare, if set, is handed the request's lookup as worked out, for
	// Replay to answer the next request of its shape without working it
	// out again.
	Prepare func(*Prepared)
}

// The tiers Request.Served reports.
const (
	TierMemory   = "memory"
	TierRedis    = "redis"
	TierFill     = "fill"
	TierStale    = "stale"
	TierUpstream = "upstream"
)

func (r *Request) served(tier string) {
	if r.Served != nil {
		r.Served(tier)
	}
}

// Fill produces the answer to a miss: the result as the caller must see it,
// or an error (never cached). An error that wraps ErrUnreachable means the
// upstream could not be reached (network, timeout, 5xx), the one case where a
// stale entry may stand in; any other error is passed on as it is.
type Fill func(ctx context.Context) (json.RawMessage, error)

// ErrUnreachable marks fill errors that allow stale-if-error. An upstream
// that answered, even with 401 or 403, was reachable: its answer stands.
var ErrUnreachable = errors.New("upstream unreachable")

// Options configure a Cache.
type Options struct {
	// MemoryBytes bounds the in-process tier; 0 turns it off.
	MemoryBytes int64
	// Redis, if set, is the tier shared by every replica.
	Redis *RedisOptions
	// Secret keys the credential fingerprints of private entries; replicas
	// sharing Redis must share it. Empty means a random one.
	Secret []byte
	// CredentialHeaders make up a caller's authorization context.
	CredentialHeaders []string
	// MaxEntryBytes bounds one stored result; larger ones are not stored.
	MaxEntryBytes int
	// MaxTTL caps the freshness an upstream's ttlMs can give an entry.
	MaxTTL time.Duration
	// StaleIfError is how long past its freshness an entry may stand in
	// for an unreachable upstream.
	StaleIfError time.Duration
	Logger       *slog.Logger
	// Refresh says which entries a read near their expiry refreshes in
	// the background: RefreshPublic ("" too), RefreshAll or RefreshOff.
	Refresh string
	// Clock tells the time; nil is time.Now. Only the memory tier's
	// freshness reads it: Redis counts with its own clock.
	Clock func() time.Time
}

// RedisOptions configure the shared tier.
type RedisOptions struct {
	// Client addresses the server, Cluster or Sentinel; the tier sets its
	// timeouts and retries from Timeout.
	Client redis.UniversalOptions
	// Prefix starts every key and the invalidation channel.
	Prefix string
	// Timeout bounds each command.
	Timeout time.Duration
	// BreakerFailures consecutive failures stop use of Redis for
	// BreakerCooldown.
	BreakerFailures int
	BreakerCooldown time.Duration
	// EncryptPrivate seals private entries' bodies (seal.go) under keys
	// derived from Options.Secret.
	EncryptPrivate bool
}

// Cache is safe for concurrent use.
type Cache struct {
	mem      memory     // nil when the memory tier is off
	redis    *redisTier // nil when there is no shared tier
	gens     generations
	fp       *fingerprinter
	flight   flight
	now      func() time.Time
	maxEntry int
	maxTTL   time.Duration
	grace    time.Duration
	refresh  string
	log      *slog.Logger

	refreshes sync.WaitGroup // refreshes under way, awaited by Close
	stats     sync.Map       // upstream name → *counters
	changes   changes
	// revalidated holds, per upstream, when changes may last have been
	// missed (local clock): entries filled before it are stale.
	revalidated sync.Map // upstream name → time.Time
	// missedBefore is when this replica's invalidation channel last came
	// back (UnixNano, local clock): messages may have been lost before it,
	// so memory entries filled before it are stale, though still usable.
	missedBefore atomic.Int64
	evictions    atomic.Uint64
	stop         context.CancelFunc
	done         chan struct{}
}

type counters struct {
	memHits, redisHits, misses, fills, stale, coalesced, sharedFills, refreshed, bypassed, invalidations atomic.Uint64
}

// New builds a cache. With Redis configured it subscribes to the
// invalidation channel at once.
func New(o Options) (*Cache, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	secret := o.Secret
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	c := &Cache{
		fp:       newFingerprinter(secret, o.CredentialHeaders),
		now:      o.Clock,
		maxEntry: o.MaxEntryBytes,
		maxTTL:   o.MaxTTL,
		grace:    o.StaleIfError,
		refresh:  cmp.Or(o.Refresh, RefreshPublic),
		log:      o.Logger,
		done:     make(chan struct{}),
	}
	c.gens.onReset = c.flushMemory
	if o.MemoryBytes > 0 {
		m, err := newRistretto(o.MemoryBytes, &c.evictions)
		if err != nil {
			return nil, fmt.Errorf("cache memory tier: %w", err)
		}
		c.mem = m
	}
	if o.Redis == nil {
		close(c.done)
		return c, nil
	}
	c.redis = newRedisTier(*o.Redis, c.maxTTL+c.grace+time.Minute, o.Logger, redisbus.NewOrigin())
	if o.Redis.EncryptPrivate {
		c.redis.sealer = seal.New(o.Secret, "manifold private entry ")
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	var wg sync.WaitGroup
	wg.Go(func() { c.redis.listen(ctx, c.applyRemote, c.missedMessages) })
	wg.Go(func() { c.redis.heartbeat(ctx, heartbeatEvery) })
	go func() {
		wg.Wait()
		close(c.done)
	}()
	return c, nil
}

// counters returns an upstream's counters. Upstream names come from the
// configuration, never from callers, so the map stays small.
func (c *Cache) counters(upstream string) *counters {
	if s, ok := c.stats.Load(upstream); ok {
		return s.(*counters)
	}
	s, _ := c.stats.LoadOrStore(upstream, &counters{})
	return s.(*counters)
}

// lookup is the state of one request's way through the tiers.
type lookup struct {
	r  Request
	st *counters
	fp string // the caller's credential fingerprint
	lookupKeys
	// memGen and redisGen are the generations in force when the lookup
	// began; what a fill stores is valid under them only.
	memGen, redisGen generation
	redisOK          bool
	stale            *entry // the best stale candidate seen, for stale-if-error
	hit              *entry // the memory entry that answered
}

var scopes = [2]string{mcp.ScopePrivate, mcp.ScopePublic}

// Get answers r from the cache, or from fill on a miss.
func (c *Cache) Get(ctx context.Context, r Request, fill Fill) (json.RawMessage, error) {
	st := c.counters(r.Upstream)
	if !r.cacheable() || (c.mem == nil && c.redis == nil) {
		st.bypassed.Add(1)
		r.served(TierUpstream)
		return fill(ctx)
	}
	l, err := c.newLookup(r, st)
	if err != nil {
		st.bypassed.Add(1)
		r.served(TierUpstream)
		return fill(ctx)
	}
	ctx, span := mcptrace.Start(ctx, tracer, "cache.lookup", func() []trace.SpanStartOption {
		return []trace.SpanStartOption{trace.WithAttributes(attribute.String("manifold.upstream", r.Upstream))}
	})
	defer span.End()
	if r.Prepare != nil {
		p := &Prepared{r: r, st: st, fp: l.fp, keys: l.lookupKeys}
		// This request's alone: its hooks, and the request itself, whose
		// headers carry the caller's credential.
		p.r.Served, p.r.Age, p.r.Prepare, p.r.Req = nil, nil, nil, nil
		r.Prepare(p)
	}
	now := c.now()
	if res, ok := c.memoryHit(ctx, l, fill, now, span); ok {
		return res, nil
	}
	if res, ok := c.fromRedis(ctx, l, now); ok {
		if span.IsRecording() {
			span.SetAttributes(attrTier.String("redis"), attrHit.Bool(true))
		}
		c.maybeRefresh(ctx, l, fill, now)
		r.served(TierRedis)
		r.aged(l.hit, now)
		return res, nil
	}
	st.misses.Add(1)
	span.SetAttributes(attrTier.String("upstream"), attrHit.Bool(false), attrCoalesced.Bool(false))
	o, err := c.fillOnce(ctx, l, fill)
	if err != nil {
		return nil, err
	}
	if o.err != nil {
		res, err := c.serveStale(l, o.err)
		if err == nil {
			span.SetAttributes(attrTier.String("stale"))
			r.served(TierStale)
			r.aged(l.stale, c.now())
		} else {
			r.served(TierFill)
		}
		return res, err
	}
	r.served(TierFill)
	return o.result, nil
}

// Keeps reports whether c has a tier to keep answers in (a nil Cache has
// none): without, Get only passes each request to its fill.
func (c *Cache) Keeps() bool { return c != nil && (c.mem != nil || c.redis != nil) }

// memoryHit serves l from the memory tier if it can.
func (c *Cache) memoryHit(ctx context.Context, l *lookup, fill Fill, now time.Time, span trace.Span) (json.RawMessage, bool) {
	res, ok := c.fromMemory(l, now)
	if !ok {
		return nil, false
	}
	l.st.memHits.Add(1)
	if span.IsRecording() {
		span.SetAttributes(attrTier.String("memory"), attrHit.Bool(true))
	}
	c.maybeRefresh(ctx, l, fill, now)
	l.r.served(TierMemory)
	l.r.aged(l.hit, now)
	return res, true
}

var (
	tracer        = otel.Tracer("github.com/manifold-mcp/manifold/cache")
	attrTier      = attribute.Key("manifold.cache.tier")
	attrHit       = attribute.Key("manifold.cache.hit")
	attrCoalesced = attribute.Key("manifold.cache.coalesced")
)

func (c *Cache) newLookup(r Request, st *counters) (*lookup, error) {
	sum, err := digest(r.EraChanges, r.Req.Method, r.Req.Params, r.Req.Meta, r.Req.Header, r.Forwarded, c.fp.set)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if c.redis != nil {
		prefix = c.redis.prefix
	}
	fp := c.fp.of(r.Req.Header, r.Principal)
	l := &lookup{r: r, st: st, fp: fp, lookupKeys: newLookupKeys(prefix, r.Upstream, r.Tag, fp, r.Req.Method, sum)}
	l.memGen = generation{Tag: c.gens.get(l.gid)}
	if c.mem != nil {
		// The memory epoch too is taken before the lookup: a flush during
		// the fill must leave what it stores unreachable.
		l.memGen.Epoch = c.mem.epoch()
	}
	return l, nil
}

// fromMemory serves a fresh memory entry of the caller's own credential or
// a public one, and remembers a stale one; its caller counts the hit.
func (c *Cache) fromMemory(l *lookup, now time.Time) (json.RawMessage, bool) {
	if c.mem == nil {
		return nil, false
	}
	fps := [2]string{l.fp, ""}
	rb := c.revalidateBefore(l.r.Upstream)
	if missed := time.Unix(0, c.missedBefore.Load()); missed.After(rb) {
		rb = missed
	}
	for i, k := range l.keys {
		e, ok := c.mem.get(k)
		if !ok || e.gen != l.memGen || e.scope != scopes[i] || e.fp != fps[i] {
			continue
		}
		if now.Before(e.expires) && e.filled.After(rb) {
			l.hit = e
			return e.result(now), true
		}
		if l.stale == nil && now.Before(e.staleUntil) {
			l.stale = e
		}
	}
	return nil, false
}

// fromRedis serves a fresh Redis entry, keeping it in memory too, and
// learns the Redis generation a fill must store under.
func (c *Cache) fromRedis(ctx context.Context, l *lookup, now time.Time) (json.RawMessage, bool) {
	return c.fromRedisIf(ctx, l, now, nil)
}

// fromRedisIf is fromRedis serving only an entry that accept (if set)
// accepts.
func (c *Cache) fromRedisIf(ctx context.Context, l *lookup, now time.Time, accept func(*entry) bool) (json.RawMessage, bool) {
	if c.redis == nil {
		return nil, false
	}
	hits, gen, ok := c.redis.lookup(ctx, l.keys[:], l.r.Upstream, l.th)
	l.redisOK, l.redisGen = ok, gen
	fps := [2]string{l.fp, ""}
	for i, h := range hits {
		if h == nil || h.hdr.Key != l.keys[i] || h.hdr.Gen != gen || h.hdr.Scope != scopes[i] || h.hdr.FP != fps[i] {
			continue
		}
		grace := time.Duration(h.hdr.GraceMs) * time.Millisecond
		e := &entry{key: l.keys[i], scope: scopes[i], fp: fps[i], gen: l.memGen, body: h.body,
			expires: now.Add(h.pttl - grace), staleUntil: now.Add(h.pttl), filled: now.Add(-h.age)}
		if h.pttl > grace && !h.revalidate && (accept == nil || accept(e)) {
			l.st.redisHits.Add(1)
			l.hit = e
			if c.mem != nil {
				c.mem.set(l.keys[i], e, h.pttl)
			}
			return e.result(now), true
		}
		if l.stale == nil {
			l.stale = e
		}
	}
	return nil, false
}

// cacheable reports whether r's answer may come from the cache: a
// cacheable method (or one an operator's Policy makes so), and not the
// retry of a multi round-trip request.
func (r *Request) cacheable() bool {
	m := r.Method
	if m == nil {
		m, _ = mcp.Lookup(r.Req.Method)
	}
	if (m == nil || !m.Cacheable) && r.Policy == nil {
		return false
	}
	_, responses := r.Req.Params["inputResponses"]
	_, state := r.Req.Params["requestState"]
	return !responses && !state
}

// Close stops the invalidation listener and releases both tiers.
func (c *Cache) Close() error {
	c.refreshes.Wait()
	if c.stop != nil {
		c.stop()
	}
	<-c.done
	if c.mem != nil {
		c.mem.close()
	}
	if c.redis != nil {
		return c.redis.close()
	}
	return nil
}
