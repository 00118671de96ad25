package router

import (
	"context"
	"encoding/json"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
)

// A plan is what serving a read taught the router about every read of its
// shape (mcp.Shape carries it from one to the next): the upstream it went
// to, in which configured set and endpoint's view, and the cache's lookup
// for it. The next read of the shape is answered from memory by the plan
// (replay), without routing, normalizing and digesting it again, for as
// long as none of what it was made under changed. It names its set and
// upstream rather than holding them: a shape remembered across a reload
// keeps no retired set, memo or upstream alive.
type plan struct {
	set      uint64 // the Seq of the configured set it was routed in
	view     *upstream.View
	upstream string
	lookup   *cache.Prepared
}

// prepared is the cache.Request.Prepare of a planned read (fetch): it
// takes the lookup the cache worked out.
func (p *plan) prepared(l *cache.Prepared) { p.lookup = l }

// replay answers req by its shape's plan when the plan still holds and the
// memory tier has the answer, as read would have (the per-upstream limit
// spent, the note n told); ok is false when read must serve it.
func (r *Router) replay(ctx context.Context, req *mcp.Request, n *Note) (res json.RawMessage, err error, ok bool) {
	p, _ := req.Shape.Plan().(*plan)
	u := r.standing(ctx, p)
	if u == nil {
		return nil, nil, false
	}
	if res, ok = r.cache.Replay(ctx, p.lookup); !ok {
		return nil, nil, false
	}
	if r.admit != nil {
		if err := r.admit(ctx, p.upstream); err != nil {
			return nil, err, true // refused as read refuses, before it counts a hit
		}
	}
	p.lookup.Hit()
	if n != nil {
		n.setUpstream(p.upstream)
		n.setTier(cache.TierMemory)
	}
	return res, nil, true
}

// standing is the upstream p routes to if p may answer for the caller of
// ctx (nil otherwise): the configured upstreams, the endpoint and the
// upstream's protocol era are those p was made under, and the upstream's
// access rules admit the caller's claims.
func (r *Router) standing(ctx context.Context, p *plan) *upstream.Upstream {
	if p == nil || upstream.ViewOf(ctx) != p.view {
		return nil
	}
	set := r.ups.Load()
	if set.Seq() != p.set {
		return nil
	}
	u := set.Get(p.upstream)
	if u == nil || u.EraChanges() != p.lookup.EraChanges() || !u.Admits(auth.ClaimsFrom(ctx)) {
		return nil
	}
	return u
}

// planned is readFrom storing, in the request's shape, the plan for the
// next read of that shape: the lookup the cache prepared for this one. A
// plan that still holds is kept (the read it missed in memory is one whose
// answer is not kept, or was invalidated: the plan is as good as a new one).
func (r *Router) planned(ctx context.Context, set *upstream.Set, h hop, uri, inner string) (json.RawMessage, error) {
	if p, _ := h.req.Shape.Plan().(*plan); r.standing(ctx, p) == h.u {
		return r.readFrom(ctx, h, uri, inner)
	}
	p := &plan{set: set.Seq(), view: set.View(), upstream: h.u.Name()}
	h.plan = p
	res, err := r.readFrom(ctx, h, uri, inner)
	if err == nil && p.lookup != nil {
		h.req.Shape.SetPlan(p)
	}
	return res, err
}
