package cache

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/mcptrace"
)

// Prepared is one request's lookup as Get worked it out (its keys, from its
// method, params, upstream, credential and forwarded headers): the same
// for every request of its shape, so Replay answers the next of them from
// memory without digesting it again. It holds no generation (invalidations
// since are seen as on any lookup), and nothing of the caller's but the
// fingerprint of its credential.
type Prepared struct {
	r    Request
	st   *counters
	fp   string
	keys lookupKeys
}

// EraChanges is the count of its upstream's era changes p was made under
// (Request.EraChanges): p is no request's once the upstream's moved on.
func (p *Prepared) EraChanges() uint64 { return p.r.EraChanges }

// Hit counts a memory hit Replay served for p.
func (p *Prepared) Hit() { p.st.memHits.Add(1) }

// Replay answers a request of p's shape from the memory tier as Get would,
// but counts no hit (Hit does, once the caller is let through): served
// from TierMemory, which p's request's hooks are not told (they were
// another request's); false when memory has no fresh entry for it, or the
// one it has is due a refresh: then Get must (and starts it).
func (c *Cache) Replay(ctx context.Context, p *Prepared) (json.RawMessage, bool) {
	if c.mem == nil {
		return nil, false
	}
	l := lookup{r: p.r, st: p.st, fp: p.fp, lookupKeys: p.keys}
	l.memGen = generation{Tag: c.gens.get(l.gid), Epoch: c.mem.epoch()}
	now := c.now()
	res, ok := c.fromMemory(&l, now)
	if !ok || c.refreshDue(&l, now) {
		return nil, false
	}
	if mcptrace.On() {
		_, span := tracer.Start(ctx, "cache.lookup", trace.WithAttributes(attribute.String("manifold.upstream", p.r.Upstream), attrTier.String("memory"), attrHit.Bool(true)))
		span.End()
	}
	return res, true
}
