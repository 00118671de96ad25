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
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/config"
	"github.com/manifold-mcp/manifold/mcp"
)

// Request is one upstream call to answer from the cache.
type Request struct {
	// Upstream names the server the call goes to.
	Upstream string
	// Tag groups entries that one notification invalidates together: the
	// resource URI of a read, TagLists for an upstream's resource lists.
	Tag string
	// Era changes when the upstream starts speaking another protocol
	// revision: an answer translated from another era is another entry.
	Era uint64
	// Req is the request as it goes upstream (params in the upstream's own
	// view).
	Req *mcp.Request
	// Forwarded names the caller headers passed on to the upstream: they
	// can change its answer, so they are part of the key.
	Forwarded []string
}

// Tags for lists, by what invalidates them.
const (
	TagResourceLists = "lists:resources" // resources/list and resources/templates/list
	TagToolLists     = "lists:tools"
	TagPromptLists   = "lists:prompts"
	TagDiscover      = "discover"
)

// Fill produces the answer to a miss: the result as the caller must see it,
// or an error (never cached). An error that wraps ErrUnreachable means the
// upstream could not be reached (network, timeout, 5xx), the one case where a
// stale entry may stand in; any other error is passed on as it is.
type Fill func(ctx context.Context) (json.RawMessage, error)

// ErrUnreachable marks fill errors that allow stale-if-error. An upstream
// that answered, even with 401 or 403, was reachable: its answer stands.
var ErrUnreachable = errors.New("upstream unreachable")

// Cache is safe for concurrent use.
type Cache struct {
	mem      memory // nil when the memory tier is off
	shared   *shared
	gens     generations
	fp       *fingerprinter
	flight   flight
	now      func() time.Time
	maxEntry int
	maxTTL   time.Duration
	grace    time.Duration
	log      *slog.Logger

	stats     map[string]*counters
	other     counters // requests for an upstream not named at construction
	evictions atomic.Uint64
	stop      context.CancelFunc
	done      chan struct{}
}

type counters struct {
	memHits, sharedHits, misses, fills, stale, coalesced, bypassed, invalidations atomic.Uint64
}

// New builds a cache for the named upstreams. With Redis configured it
// subscribes to the invalidation channel at once.
func New(cfg config.Cache, upstreams []string, log *slog.Logger) (*Cache, error) {
	if log == nil {
		log = slog.Default()
	}
	secret := []byte(cfg.Secret)
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	c := &Cache{
		fp:       newFingerprinter(secret, cfg.CredentialHeaders),
		now:      time.Now,
		maxEntry: int(cfg.MaxEntryBytes),
		maxTTL:   cfg.MaxTTL,
		grace:    *cfg.StaleIfError,
		log:      log,
		stats:    map[string]*counters{},
		done:     make(chan struct{}),
	}
	for _, u := range upstreams {
		c.stats[u] = &counters{}
	}
	if n := int64(*cfg.Memory.MaxBytes); n > 0 {
		m, err := newRistretto(n, &c.evictions)
		if err != nil {
			return nil, fmt.Errorf("cache memory tier: %w", err)
		}
		c.mem = m
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	if cfg.Redis.Enabled() {
		origin := make([]byte, 8)
		_, _ = rand.Read(origin)
		s, err := newShared(cfg, c.maxTTL+c.grace+time.Minute, log, hex.EncodeToString(origin))
		if err != nil {
			return nil, err
		}
		c.shared = s
		go func() {
			defer close(c.done)
			s.listen(ctx, c.applyRemote, c.flushMemory)
		}()
	} else {
		close(c.done)
	}
	return c, nil
}

func (c *Cache) counters(upstream string) *counters {
	if s := c.stats[upstream]; s != nil {
		return s
	}
	return &c.other
}

// Get answers r from the cache, or from fill on a miss.
func (c *Cache) Get(ctx context.Context, r Request, fill Fill) (json.RawMessage, error) {
	st := c.counters(r.Upstream)
	if !cacheable(r.Req) || (c.mem == nil && c.shared == nil) {
		st.bypassed.Add(1)
		return fill(ctx)
	}
	dig, err := digest(r.Era, r.Req.Method, r.Req.Params, r.Req.Meta, r.Req.Header, r.Forwarded, c.fp.set)
	if err != nil {
		st.bypassed.Add(1)
		return fill(ctx)
	}
	fp := c.fp.of(r.Req.Header)
	th := tagHash(r.Tag)
	gid := r.Upstream + "\x00" + th
	prefix := ""
	if c.shared != nil {
		prefix = c.shared.prefix
	}
	keys := [2]string{
		entryKey(prefix, r.Upstream, th, mcp.ScopePrivate, fp, r.Req.Method, dig),
		entryKey(prefix, r.Upstream, th, mcp.ScopePublic, "", r.Req.Method, dig),
	}
	scopes := [2]string{mcp.ScopePrivate, mcp.ScopePublic}
	fps := [2]string{fp, ""}
	now := c.now()
	localGen := generation{Tag: c.gens.get(gid), Upstream: c.gens.get(r.Upstream)}
	if c.mem != nil {
		// The memory epoch too is taken before the lookup: a flush during
		// the fill must leave what it stores unreachable.
		localGen.Epoch = c.mem.epoch()
	}

	var stale *entry
	if c.mem != nil {
		for i, k := range keys {
			e, ok := c.mem.get(k)
			if !ok || e.gen != localGen || e.scope != scopes[i] || e.fp != fps[i] {
				continue
			}
			if now.Before(e.expires) {
				st.memHits.Add(1)
				return e.result(now), nil
			}
			if stale == nil && now.Before(e.staleUntil) {
				stale = e
			}
		}
	}

	var sharedGen generation
	sharedOK := false
	if c.shared != nil {
		hits, gen, ok := c.shared.lookup(ctx, keys[:], r.Upstream, th)
		sharedOK, sharedGen = ok, gen
		for i, h := range hits {
			if h == nil || h.hdr.Key != keys[i] || h.hdr.Gen != gen || h.hdr.Scope != scopes[i] || h.hdr.FP != fps[i] {
				continue
			}
			grace := time.Duration(h.hdr.GraceMs) * time.Millisecond
			e := &entry{key: keys[i], scope: scopes[i], fp: fps[i], gen: localGen, body: h.body,
				expires: now.Add(h.pttl - grace), staleUntil: now.Add(h.pttl)}
			if h.pttl > grace {
				st.sharedHits.Add(1)
				if c.mem != nil {
					c.mem.set(keys[i], e, h.pttl)
				}
				return e.result(now), nil
			}
			if stale == nil {
				stale = e
			}
		}
	}

	st.misses.Add(1)
	fillFor := func(fctx context.Context) outcome {
		st.fills.Add(1)
		return c.fill(fctx, fill, keys, fp, localGen, sharedGen, sharedOK)
	}
	// A read that starts after an invalidation must not join a fill that
	// started before it: the generations are part of the flight's key.
	flightKey := fmt.Sprintf("%s\x00%s\x00%s\x00%v\x00%v", gid, r.Req.Method, dig, localGen, sharedGen)
	o, collapsed, err := c.flight.do(ctx, flightKey, fillFor)
	if err != nil {
		return nil, err
	}
	if collapsed {
		st.coalesced.Add(1)
		// Only a public answer crosses credentials. A private answer, or an
		// error (it may say something about the caller), filled for another
		// credential is not ours: fill again, collapsing only with callers
		// of our own credential.
		if o.fp != fp && (o.err != nil || o.scope != mcp.ScopePublic) {
			o, _, err = c.flight.do(ctx, flightKey+"\x00"+fp, fillFor)
			if err != nil {
				return nil, err
			}
		}
	}
	if collapsed && o.shared != nil {
		// Another caller's fill: what belonged to that request (its trace
		// context, its progress token) is not ours.
		o.result = o.shared
	}
	if o.err != nil {
		if stale != nil && errors.Is(o.err, ErrUnreachable) {
			st.stale.Add(1)
			c.log.Warn("upstream unreachable; serving a stale entry", "upstream", r.Upstream, "method", r.Req.Method, "err", o.err)
			return splice(stale.body, 0, stale.scope), nil
		}
		return nil, o.err
	}
	return o.result, nil
}

// fill runs a miss and stores what may be stored.
func (c *Cache) fill(ctx context.Context, fill Fill, keys [2]string, fp string, localGen, sharedGen generation, sharedOK bool) outcome {
	res, err := fill(ctx)
	if err != nil {
		return outcome{err: err, fp: fp}
	}
	h, err := parseHints(res)
	if err != nil || !h.complete {
		// input_required, or something that is not a result object:
		// passed on, never stored, and never shared across credentials.
		return outcome{result: res, fp: fp}
	}
	o := outcome{result: res, shared: splice(h.body, h.ttl.Milliseconds(), h.scope), scope: h.scope, fp: fp}
	ttl := min(h.ttl, c.maxTTL)
	if ttl <= 0 || len(h.body) > c.maxEntry {
		return o
	}
	key, efp := keys[1], ""
	if h.scope == mcp.ScopePrivate {
		key, efp = keys[0], fp
	}
	now := c.now()
	e := &entry{key: key, scope: h.scope, fp: efp, gen: localGen, body: h.body, expires: now.Add(ttl), staleUntil: now.Add(ttl + c.grace)}
	if c.mem != nil {
		c.mem.set(key, e, ttl+c.grace)
	}
	if c.shared != nil && sharedOK {
		se := *e
		se.gen = sharedGen
		c.shared.write(&se, ttl, c.grace)
	}
	return o
}

// cacheable reports whether a request's answer may come from the cache:
// a cacheable method, and not the retry of a multi round-trip request.
func cacheable(r *mcp.Request) bool {
	if !mcp.Cacheable(r.Method) {
		return false
	}
	_, responses := r.Params["inputResponses"]
	_, state := r.Params["requestState"]
	return !responses && !state
}

// Invalidate makes every entry of (upstream, tag) unreachable, on this
// replica now and on the others as the message reaches them.
func (c *Cache) Invalidate(ctx context.Context, upstream, tag string) {
	c.invalidate(ctx, upstream, tagHash(tag))
}

// InvalidateUpstream makes every entry of upstream unreachable, as
// Invalidate does for one tag: for when changes may have been missed.
func (c *Cache) InvalidateUpstream(ctx context.Context, upstream string) {
	c.invalidate(ctx, upstream, "")
}

func (c *Cache) invalidate(ctx context.Context, upstream, th string) {
	// Redis first: were memory raised first, a read on this replica in
	// between would find memory empty, fetch the old entry from Redis and
	// keep it in memory under the new generation. Raised this way round,
	// such a read misses in Redis and fills fresh. If Redis cannot be
	// reached, the shared epoch is raised on the next contact (missed).
	if c.shared != nil {
		c.shared.invalidate(ctx, upstream, th)
	}
	c.raiseLocal(upstream, th)
	c.counters(upstream).invalidations.Add(1)
}

func (c *Cache) raiseLocal(upstream, th string) {
	id := upstream
	if th != "" {
		id += "\x00" + th
	}
	if _, reset := c.gens.raise(id, 0); reset {
		c.flushMemory()
	}
}

func (c *Cache) applyRemote(inv invalidation) {
	if inv.Upstream == "" { // the shared epoch moved: everything is suspect
		c.flushMemory()
		return
	}
	c.raiseLocal(inv.Upstream, inv.TagHash)
}

func (c *Cache) flushMemory() {
	if c.mem != nil {
		c.mem.flush()
	}
}

// Close stops the invalidation listener and releases both tiers.
func (c *Cache) Close() error {
	c.stop()
	<-c.done
	if c.mem != nil {
		c.mem.close()
	}
	if c.shared != nil {
		return c.shared.close()
	}
	return nil
}
