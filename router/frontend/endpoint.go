package frontend

import (
	"context"
	"net/http"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/upstream"
)

// A curated endpoint (upstream.View) is the same frontends on another
// path: AtEndpoint, one link of the chain, puts the view in the request's
// context, where the router and the hub find it, and answers a caller the
// view's access rules do not admit as a path nothing is served on. A
// legacy session belongs to the endpoint it was opened on (Legacy.Session),
// and an HTTP+SSE stream names its endpoint's messages path.

// AtEndpoint serves what follows as the endpoint of v. It must follow
// Authenticate, whose principal it judges: one v does not admit gets the
// mux's own 404, so nothing tells it the endpoint exists.
func AtEndpoint(v *upstream.View) Link {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !v.Admits(auth.ClaimsFrom(r.Context())) {
				http.NotFound(w, r)
				return
			}
			next.ServeHTTP(w, r.WithContext(upstream.WithView(r.Context(), v)))
		})
	}
}

// endpointOf names the endpoint ctx is served at: its path, "" for the
// main one (whose sessions and paths are those of before endpoints).
func endpointOf(ctx context.Context) string {
	if v := upstream.ViewOf(ctx); v != nil {
		return v.Path
	}
	return ""
}
