package router

import (
	"context"
	"encoding/json"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
)

// A readPlan is what serving a read taught the router about every read of
// its shape (mcp.Shape): the upstream it went to, in which configured set
// and endpoint's view, and the cache's lookup for it. The next read of the
// shape is answered from memory by the plan (replay), without routing,
// normalizing and digesting it again, for as long as none of what it was
// made under changed. It names its set and upstream rather than holding
// them: a shape remembered across a reload keeps no retired set, memo or
// upstream alive.
type readPlan struct {
	set      uint64 // the Seq of the configured set it was routed in
	view     *upstream.View
	upstream string
	prepared *cache.Prepared
}

// replay answers req by its shape's plan when the plan still holds and the
// memory tier has the answer, as read would have (the per-upstream limit
// spent, the note told); ok is false when read must serve it.
func (r *Router) replay(ctx context.Context, req *mcp.Request) (res json.RawMessage, err error, ok bool) {
	p, _ := req.Shape.Plan().(*readPlan)
	u := r.standing(ctx, p)
	if u == nil {
		return nil, nil, false
	}
	if res, ok = r.cache.Replay(ctx, p.prepared); !ok {
		return nil, nil, false
	}
	if r.admit != nil {
		if err := r.admit(ctx, p.upstream); err != nil {
			return nil, err, true // refused as read refuses, before it counts a hit
		}
	}
	p.prepared.Hit()
	if n := noteOf(ctx); n != nil {
		n.setUpstream(p.upstream)
		n.setTier(cache.TierMemory)
	}
	return res, nil, true
}

// standing is the upstream p routes to if p may answer for the caller of
// ctx (nil otherwise): the configured upstreams, the endpoint and the
// upstream's protocol era are those p was made under, and the upstream's
// access rules admit the caller's claims.
func (r *Router) standing(ctx context.Context, p *readPlan) *upstream.Upstream {
	if p == nil || upstream.ViewOf(ctx) != p.view {
		return nil
	}
	set := r.ups.Load()
	if set.Seq() != p.set {
		return nil
	}
	u := set.Get(p.upstream)
	if u == nil || u.EraChanges() != p.prepared.EraChanges() || !u.Admits(auth.ClaimsFrom(ctx)) {
		return nil
	}
	return u
}

// planned is readFrom storing, in the request's shape, the plan for the
// next read of that shape: the lookup the cache prepared for this one. A
// plan that still holds is kept (the read it missed in memory is one whose
// answer is not kept, or was invalidated: the plan is as good as a new one).
func (r *Router) planned(ctx context.Context, set *upstream.Set, u *upstream.Upstream, req *mcp.Request, uri, inner string) (json.RawMessage, error) {
	if p, _ := req.Shape.Plan().(*readPlan); r.standing(ctx, p) == u {
		return r.readFrom(ctx, u, req, uri, inner)
	}
	var prepared *cache.Prepared
	res, err := r.readFrom(context.WithValue(ctx, prepareKey{}, &prepared), u, req, uri, inner)
	if err == nil && prepared != nil {
		req.Shape.SetPlan(&readPlan{set: set.Seq(), view: set.View(), upstream: u.Name(), prepared: prepared})
	}
	return res, err
}

// prepareKey marks the context of a planned read with where the cache's
// prepared lookup goes (fetch).
type prepareKey struct{}

// preparing is the cache.Request.Prepare of a planned read, nil otherwise.
func preparing(ctx context.Context, req *mcp.Request) func(*cache.Prepared) {
	if req.Shape == nil {
		return nil
	}
	slot, _ := ctx.Value(prepareKey{}).(**cache.Prepared)
	if slot == nil {
		return nil
	}
	return func(p *cache.Prepared) { *slot = p }
}
