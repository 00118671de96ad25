package router

import (
	"log/slog"
	"sync"

	"github.com/manifold-mcp/manifold/jsonrpc"
	"github.com/manifold-mcp/manifold/mcp"
	"github.com/manifold-mcp/manifold/uritemplate"
)

// routes is what a Router without namespaces knows about which upstream
// serves which URI, learnt from the list pages that pass through it. A URI two
// upstreams list belongs to the first in configuration order, whatever order
// the pages arrived in. The table is bounded; past the bound, reads fall back
// to asking upstreams in order, which gives the same answer more slowly.
type routes struct {
	names []string
	rank  map[string]int
	log   *slog.Logger

	mu        sync.RWMutex
	uris      map[string]string
	templates map[string]map[string]*uritemplate.Template // upstream → text → template
	collided  map[string]bool                             // URIs whose collision was logged
	size      int
}

// maxRoutes bounds the learnt URIs and templates together.
const maxRoutes = 200_000

func newRoutes(names []string, log *slog.Logger) *routes {
	rank := make(map[string]int, len(names))
	for i, n := range names {
		rank[n] = i
	}
	return &routes{names: names, rank: rank, log: log, uris: map[string]string{}, templates: map[string]map[string]*uritemplate.Template{}, collided: map[string]bool{}}
}

// observe learns from one upstream's list page.
func (t *routes) observe(upstream, method string, items []jsonrpc.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch method {
	case mcp.MethodResourcesList:
		for _, item := range items {
			uri := item.String("uri")
			owner, known := t.uris[uri]
			switch {
			case known && owner == upstream:
			case known && t.rank[upstream] < t.rank[owner]:
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

// candidates returns the upstreams to ask for uri, in order.
func (t *routes) candidates(uri string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if owner, ok := t.uris[uri]; ok {
		return []string{owner}
	}
	out := make([]string, 0, len(t.names))
	matched := map[string]bool{}
	for _, name := range t.names {
		for _, tmpl := range t.templates[name] {
			if tmpl.Match(uri) {
				out = append(out, name)
				matched[name] = true
				break
			}
		}
	}
	for _, name := range t.names {
		if !matched[name] {
			out = append(out, name)
		}
	}
	return out
}
