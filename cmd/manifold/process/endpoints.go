package process

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/router/frontend"
	"github.com/manifold-mcp/manifold/upstream"
)

// Curated endpoints: each configured endpoint is the frontends of /mcp on
// a path of its own (its Streamable HTTP path, and its HTTP+SSE transport
// at PATH/sse and PATH/messages), through the same chain of links with one
// more, frontend.AtEndpoint, which puts its view in the request's context.

// newViews builds the endpoints' views, in configuration order.
func newViews(eps []config.Endpoint) ([]*upstream.View, error) {
	views := make([]*upstream.View, 0, len(eps))
	for i, e := range eps {
		v := &upstream.View{Path: e.Path, Search: e.Catalog == config.CatalogSearch}
		if len(e.Upstreams) > 0 {
			v.Upstreams = slices.Clone(e.Upstreams)
		}
		for _, f := range []struct {
			dst  *glob.Set
			src  config.Filter
			name string
		}{{&v.Tools, e.Tools, "tools"}, {&v.Prompts, e.Prompts, "prompts"}, {&v.Resources, e.Resources, "resources"}} {
			s, err := glob.NewSet(f.src.Allow, f.src.Deny)
			if err != nil {
				return nil, fmt.Errorf("endpoints[%d].%s.%w", i, f.name, err)
			}
			*f.dst = s
		}
		for _, r := range e.Access {
			v.Access = append(v.Access, upstream.AccessRule{Claim: r.Claim, Values: r.Values})
		}
		views = append(views, v)
	}
	return views, nil
}

// viewAt returns the view of the endpoint at path: nil for "" or /mcp.
func (p *Process) viewAt(at string) (*upstream.View, error) {
	if at == "" || at == upstream.MainPath {
		return nil, nil
	}
	for _, v := range p.views {
		if v.Path == at {
			return v, nil
		}
	}
	return nil, fmt.Errorf("%s is not a configured endpoint", at)
}

// mountEndpoints serves every endpoint on mux. An endpoint with access
// rules is hidden from the callers it does not admit (404); so that an
// unauthenticated caller cannot tell it from a path nothing is served on
// either, every other path of the listener answers as it does: 401 without
// credentials, 404 with them.
func (p *Process) mountEndpoints(mux *http.ServeMux, legacy *frontend.Legacy, sse *frontend.SSE) {
	hidden := false
	for _, v := range p.views {
		links := p.links(v)
		mux.Handle(v.Path, frontend.Chain(frontend.NewHTTP(p.dispatch, legacy), links...))
		mux.Handle(v.Path+frontend.SSEStreamPath, frontend.Chain(sse.Stream(), links...))
		mux.Handle(v.Path+frontend.SSEMessagesPath, frontend.Chain(sse.Messages(), links...))
		hidden = hidden || len(v.Access) > 0 && p.auth.Enabled()
	}
	if hidden {
		// Every other path challenges a caller without credentials as a
		// restricted endpoint does, so that the challenge tells nothing of
		// where one lives; once authenticated, it is not found.
		mux.Handle("/", frontend.Chain(http.NotFoundHandler(), p.links(nil)...))
	}
}

// uiEndpoint is one curated endpoint's view, as the admin page shows it.
type uiEndpoint struct {
	Path string `json:"path"`
	// Upstreams are those it serves that the page's reader sees.
	Upstreams []string `json:"upstreams"`
	Tools     uiGlobs  `json:"tools"`
	Prompts   uiGlobs  `json:"prompts"`
	Resources uiGlobs  `json:"resources"`
	// Restricted: it has access rules; Access names them to an operator.
	Restricted bool       `json:"restricted"`
	Access     []uiAccess `json:"access,omitempty"`
}

type uiAccess struct {
	Claim  string   `json:"claim"`
	Values []string `json:"values"`
}

type uiGlobs struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

// endpointsSeenBy are the endpoints a may use, each with what it serves
// of what a sees.
func (p *Process) endpointsSeenBy(a audience) []uiEndpoint {
	out := []uiEndpoint{}
	set := p.upstreams.Load()
	for _, v := range p.views {
		if !a.uses(v.Path) {
			continue
		}
		e := uiEndpoint{Path: v.Path, Upstreams: []string{}, Restricted: len(v.Access) > 0,
			Tools: uiGlobs{v.Tools.Allow(), v.Tools.Deny()}, Prompts: uiGlobs{v.Prompts.Allow(), v.Prompts.Deny()},
			Resources: uiGlobs{v.Resources.Allow(), v.Resources.Deny()}}
		for _, name := range set.In(v).Names() {
			if a.sees(name) {
				e.Upstreams = append(e.Upstreams, name)
			}
		}
		if a.all {
			for _, r := range v.Access {
				e.Access = append(e.Access, uiAccess{r.Claim, r.Values})
			}
		}
		out = append(out, e)
	}
	return out
}
