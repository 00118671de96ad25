package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// fillOnce runs the fill, collapsing concurrent misses of one key into one
// upstream call, and makes sure what a waiter gets was its to get.
func (c *Cache) fillOnce(ctx context.Context, l *lookup, fill Fill) (outcome, error) {
	run := func(fctx context.Context) outcome {
		// Look again, as groupcache does: a fill that finished just after
		// this caller's lookup has stored what it would fetch again.
		if res, ok := c.fromMemory(l, c.now()); ok {
			l.st.memHits.Add(1)
			return outcome{result: res, reusable: res, fp: l.fp}
		}
		return c.fillShared(fctx, fill, l, nil)
	}
	key := flightKey(l)
	o, joined, err := c.flight.do(ctx, key, run)
	if err != nil || !joined {
		return o, err
	}
	if o.solo {
		// An answer that may not be stored (input_required) is the asking
		// request's own: ask for ours.
		return run(ctx), nil
	}
	l.st.coalesced.Add(1)
	trace.SpanFromContext(ctx).SetAttributes(attrCoalesced.Bool(true))
	// Only a public answer crosses credentials. A private answer, or an
	// error (it may say something about the caller), filled for another
	// credential is not ours: fill again, collapsing only with callers of
	// our own credential.
	if o.fp != l.fp && (o.err != nil || o.scope != mcp.ScopePublic) {
		o, joined, err = c.flight.do(ctx, key+"\x00"+l.fp, run)
		if err != nil || !joined {
			return o, err
		}
	}
	if o.shared != nil {
		o.reusable = o.shared.reusable()
	}
	if o.reusable != nil {
		// Another caller's fill: what belonged to that request (its trace
		// context, its progress token) is not ours.
		o.result = o.reusable
	}
	return o, nil
}

// withTTL is res saying ttl as its ttlMs: what max_ttl caps, nobody is
// told may last longer.
func withTTL(res json.RawMessage, ttl time.Duration) json.RawMessage {
	obj, err := jsonrpc.ParseObject(res)
	if err != nil {
		return res
	}
	obj["ttlMs"] = strconv.AppendInt(nil, ttl.Milliseconds(), 10)
	return obj.Marshal()
}

// oversized is the outcome of an answer too large to store, read without
// copying: whether it is complete and its scope, with its reusable form
// made on first need.
func oversized(res json.RawMessage, fp string) outcome {
	rt, _ := jsonrpc.MemberString(res, "resultType")
	if rt != mcp.ResultTypeComplete {
		return outcome{result: res, fp: fp, solo: true}
	}
	scope, _ := jsonrpc.MemberString(res, "cacheScope")
	return outcome{result: res, scope: mcp.NormalizeScope(scope), fp: fp, shared: &lazyShare{raw: res}}
}

// lazyShare makes, once, the form of an answer its joiners get.
type lazyShare struct {
	once sync.Once
	raw  []byte
	out  []byte
}

func (s *lazyShare) reusable() []byte {
	s.once.Do(func() {
		if h, err := parseHints(s.raw); err == nil {
			s.out = splice(h.body, h.ttl.Milliseconds(), h.scope)
		}
	})
	return s.out
}

// flightKey is the single flight's key for l. A read that starts after an
// invalidation must not join a fill that started before it: the
// generations are part of the key.
func flightKey(l *lookup) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%v\x00%v", l.gid, l.r.Req.Method, l.dig, l.memGen, l.redisGen)
}

// serveStale answers a failed fill with the stale entry the lookup saw, if
// the upstream could not be reached and there is one.
func (c *Cache) serveStale(l *lookup, err error) (json.RawMessage, error) {
	if l.stale == nil || !l.r.stale() || !errors.Is(err, ErrUnreachable) {
		return nil, err
	}
	l.st.stale.Add(1)
	// Counted, and at debug only: the outage is the upstream's health
	// summary's to tell, once, not a line per key served meanwhile.
	c.log.Debug("upstream unreachable; serving a stale entry", "upstream", l.r.Upstream, "method", l.r.Req.Method, "err", err)
	return splice(l.stale.body, 0, l.stale.scope), nil
}

// fill runs a miss and stores what may be stored. ls, the fill lease
// this replica may hold, is released once the entry is in Redis, or at
// once when nothing will be.
func (c *Cache) fill(ctx context.Context, fill Fill, l *lookup, ls lease) outcome {
	l.st.fills.Add(1)
	if c.redis != nil {
		defer func() { c.redis.releaseLater(ls, false) }() // a no-op once write took it
	}
	// An entry is dated from when its fill began: one that began before a
	// Revalidate may carry what the revalidation was about.
	began := c.now()
	res, err := fill(ctx)
	if err != nil {
		return outcome{err: err, fp: l.fp}
	}
	if len(res) > c.maxEntry+64 {
		// Too large to store (the hints add less than 64 bytes): only its
		// scope is read, in place, and a copy for the misses that joined
		// the fill is made only if there are some; they share it rather
		// than each ask the upstream again.
		return oversized(res, l.fp)
	}
	h, err := parseHints(res)
	if err != nil || !h.complete {
		// input_required, or something that is not a result object:
		// passed on, never stored, and never handed to another caller.
		return outcome{result: res, fp: l.fp, solo: true}
	}
	ttl := min(h.ttl, c.maxTTL)
	if ttl < h.ttl {
		res = withTTL(res, ttl)
	}
	o := outcome{result: res, reusable: splice(h.body, ttl.Milliseconds(), h.scope), scope: h.scope, fp: l.fp}
	if ttl <= 0 || len(h.body) > c.maxEntry {
		return o
	}
	key, efp := l.keys[1], ""
	if h.scope == mcp.ScopePrivate {
		key, efp = l.keys[0], l.fp
	}
	now := c.now()
	e := &entry{key: key, scope: h.scope, fp: efp, gen: l.memGen, body: h.body, expires: now.Add(ttl), staleUntil: now.Add(ttl + c.grace), filled: began}
	if c.mem != nil {
		c.mem.set(key, e, ttl+c.grace)
	}
	if c.redis != nil && l.redisOK {
		re := *e
		re.gen = l.redisGen
		c.redis.write(&re, ttl, c.grace, now.Sub(began), &ls)
	}
	return o
}
