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
// made under changed.
type readPlan struct {
	root     *upstream.Set // the configured set it was routed in
	view     *upstream.View
	u        *upstream.Upstream
	prepared *cache.Prepared
}

// replay answers req by its shape's plan when the plan still holds and the
// memory tier has the answer, as read would have (the per-upstream limit
// spent, the note told); ok is false when read must serve it.
func (r *Router) replay(ctx context.Context, req *mcp.Request) (res json.RawMessage, err error, ok bool) {
	p, _ := req.Shape.Plan().(*readPlan)
	if !r.stands(ctx, p) {
		return nil, nil, false
	}
	if res, ok = r.cache.Replay(ctx, p.prepared); !ok {
		return nil, nil, false
	}
	if r.admit != nil {
		if err := r.admit(ctx, p.u.Name()); err != nil {
			return nil, err, true
		}
	}
	if n := noteOf(ctx); n != nil {
		n.setUpstream(p.u.Name())
		n.setTier(cache.TierMemory)
	}
	return res, nil, true
}

// stands reports whether p may answer for the caller of ctx: the configured
// upstreams, the endpoint and the upstream's protocol era are those p was
// made under, and the upstream's access rules admit the caller's claims.
func (r *Router) stands(ctx context.Context, p *readPlan) bool {
	return p != nil && r.ups.Load() == p.root && upstream.ViewOf(ctx) == p.view &&
		p.u.EraChanges() == p.prepared.EraChanges() && p.u.Admits(auth.ClaimsFrom(ctx))
}

// planned is readFrom storing, in the request's shape, the plan for the
// next read of that shape: the lookup the cache prepared for this one. A
// plan that still holds is kept (the read it missed in memory is one whose
// answer is not kept, or was invalidated: the plan is as good as a new one).
func (r *Router) planned(ctx context.Context, set *upstream.Set, u *upstream.Upstream, req *mcp.Request, uri, inner string) (json.RawMessage, error) {
	if p, _ := req.Shape.Plan().(*readPlan); r.stands(ctx, p) && p.u == u {
		return r.readFrom(ctx, u, req, uri, inner)
	}
	var prepared *cache.Prepared
	res, err := r.readFrom(context.WithValue(ctx, prepareKey{}, &prepared), u, req, uri, inner)
	if err == nil && prepared != nil {
		req.Shape.SetPlan(&readPlan{root: set.Root(), view: set.View(), u: u, prepared: prepared})
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
