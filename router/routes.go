package router

import (
	"log/slog"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/uritemplate"
)

// routes is what a Router without namespaces knows about which upstream
// serves which URI, learnt from the list pages that pass through it. A URI two
// upstreams list belongs to the first in configuration order, whatever order
// the pages arrived in. The table is bounded; past the bound, reads fall back
// to asking upstreams in order, which gives the same answer more slowly.
type routes struct {
	log *slog.Logger

	mu        sync.RWMutex
	uris      map[string]string
	templates map[string]map[string]*uritemplate.Template // upstream → text → template
	collided  map[string]bool                             // URIs whose collision was logged
	size      int
}

// maxRoutes bounds the learnt URIs and templates together.
const maxRoutes = 200_000

func newRoutes(log *slog.Logger) *routes {
	return &routes{log: log, uris: map[string]string{}, templates: map[string]map[string]*uritemplate.Template{}, collided: map[string]bool{}}
}

// observe learns from one upstream's list page; names is the configuration
// order, which settles a URI two upstreams list.
func (t *routes) observe(names []string, upstream, method string, items []jsonrpc.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch method {
	case mcp.MethodResourcesList:
		for _, item := range items {
			uri := item.String("uri")
			owner, known := t.uris[uri]
			switch {
			case known && owner == upstream:
			case known && slices.Index(names, upstream) < slices.Index(names, owner):
				t.uris[uri] = upstream
				t.logCollision(uri, upstream, owner)
			case known:
				t.logCollision(uri, owner, upstream)
			case t.size < maxRoutes:
				t.uris[uri] = upstream
				t.size++
			}
		}
	case mcp.MethodTemplatesList:
		set := t.templates[upstream]
		if set == nil {
			set = map[string]*uritemplate.Template{}
			t.templates[upstream] = set
		}
		for _, item := range items {
			text := item.String("uriTemplate")
			if _, ok := set[text]; ok || t.size >= maxRoutes {
				continue
			}
			tmpl, err := uritemplate.Parse(text)
			if err != nil {
				t.log.Warn("upstream lists an invalid URI template", "upstream", upstream, "uriTemplate", text, "err", err)
				continue
			}
			set[text] = tmpl
			t.size++
		}
	}
}

// logCollision logs a collision once per URI; t.mu is held.
func (t *routes) logCollision(uri, kept, dropped string) {
	if t.collided[uri] || len(t.collided) >= maxRoutes {
		return
	}
	t.collided[uri] = true
	t.log.Warn("two upstreams list the same URI; reads go to the first in configuration order", "uri", uri, "routedTo", kept, "alsoListedBy", dropped)
}

// candidates returns the upstreams of names to ask for uri, in order.
func (t *routes) candidates(names []string, uri string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if owner, ok := t.uris[uri]; ok && slices.Contains(names, owner) {
		return []string{owner}
	}
	out := make([]string, 0, len(names))
	matched := map[string]bool{}
	for _, name := range names {
		for _, tmpl := range t.templates[name] {
			if tmpl.Match(uri) {
				out = append(out, name)
				matched[name] = true
				break
			}
		}
	}
	for _, name := range names {
		if !matched[name] {
			out = append(out, name)
		}
	}
	return out
}
