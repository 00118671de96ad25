package router

import (
	"encoding/json"
	"log/slog"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/uritemplate"
)

// routes is what a Router knows from the list pages that pass through it:
// without namespaces, which upstream serves which URI, template, tool or
// prompt name; in either mode, which tool parameters are mirrored in
// headers. An identity two upstreams list belongs to the first in
// configuration order, whatever order the pages arrived in, and the
// collision is logged once. The tables are bounded together; past the
// bound, routing falls back to asking upstreams in order (URIs) or to
// listing again (names), which gives the same answer more slowly.
type routes struct {
	log *slog.Logger
	// byURI: learn which upstream serves which URI and template (needed
	// without namespaces only, where a URI names no upstream).
	byURI bool

	mu        sync.RWMutex
	uris      map[string]string
	names     map[string]map[string]string                // list method → name → upstream
	templates map[string]map[string]*uritemplate.Template // upstream → text → template
	headers   map[string][]mcp.ParamHeader                // merged-view tool name → its mirrored params
	collided  map[string]bool                             // identities whose collision was logged
	size      int
}

// maxRoutes bounds everything learnt together.
const maxRoutes = 200_000

func newRoutes(log *slog.Logger, byURI bool) *routes {
	return &routes{log: log, byURI: byURI, uris: map[string]string{}, names: map[string]map[string]string{},
		templates: map[string]map[string]*uritemplate.Template{}, headers: map[string][]mcp.ParamHeader{}, collided: map[string]bool{}}
}

// observe learns from one upstream's list page, in the merged view; order
// is the configuration order, which settles an identity two upstreams list.
func (t *routes) observe(order []string, upstream, method string, list json.RawMessage) {
	if !t.byURI && (method == mcp.MethodResourcesList || method == mcp.MethodTemplatesList) {
		return
	}
	items, err := jsonrpc.Elements(list)
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch method {
	case mcp.MethodResourcesList:
		for _, item := range items {
			uri, _ := jsonrpc.MemberString(item, "uri")
			t.own(t.uris, order, uri, upstream)
		}
	case mcp.MethodTemplatesList:
		t.learnTemplates(upstream, items)
	case mcp.MethodToolsList, mcp.MethodPromptsList:
		owners := t.names[method]
		if owners == nil {
			owners = map[string]string{}
			t.names[method] = owners
		}
		for _, item := range items {
			name, _ := jsonrpc.MemberString(item, "name")
			if t.own(owners, order, name, upstream) && method == mcp.MethodToolsList {
				t.learnHeaders(name, item)
			}
		}
	}
}

// own records upstream as the owner of id unless an upstream earlier in
// order owns it, and reports whether upstream owns it now.
func (t *routes) own(owners map[string]string, order []string, id, upstream string) bool {
	owner, known := owners[id]
	switch {
	case known && owner == upstream:
		return true
	case known && slices.Index(order, upstream) < slices.Index(order, owner):
		owners[id] = upstream
		t.logCollision(id, upstream, owner)
		return true
	case known:
		t.logCollision(id, owner, upstream)
		return false
	case t.size < maxRoutes:
		owners[id] = upstream
		t.size++
		return true
	}
	return false
}

func (t *routes) learnTemplates(upstream string, items []json.RawMessage) {
	set := t.templates[upstream]
	if set == nil {
		set = map[string]*uritemplate.Template{}
		t.templates[upstream] = set
	}
	for _, item := range items {
		text, _ := jsonrpc.MemberString(item, "uriTemplate")
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

// learnHeaders records a listed tool's header-mirrored parameters; the
// router already left tools with invalid annotations out of the page.
func (t *routes) learnHeaders(name string, raw json.RawMessage) {
	tool, err := jsonrpc.ParseObject(raw)
	if err != nil {
		return
	}
	hs, err := mcp.ParamHeaders(tool)
	if err != nil || len(hs) == 0 {
		delete(t.headers, name)
		return
	}
	if _, ok := t.headers[name]; !ok && len(t.headers) >= maxRoutes {
		return
	}
	t.headers[name] = hs
}

// logCollision logs a collision once per identity; t.mu is held.
func (t *routes) logCollision(id, kept, dropped string) {
	if t.collided[id] || len(t.collided) >= maxRoutes {
		return
	}
	t.collided[id] = true
	t.log.Warn("two upstreams list the same identity; calls go to the first in configuration order", "id", id, "routedTo", kept, "alsoListedBy", dropped)
}

// owner returns the upstream of names that lists name in list, if known.
func (t *routes) owner(names []string, list, name string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	owner, ok := t.names[list][name]
	return owner, ok && slices.Contains(names, owner)
}

// served records that upstream answered a read of uri: a resource found
// away from its recorded owner has moved, and the new place owns it.
func (t *routes) served(uri, upstream string) {
	t.mu.RLock()
	owner, ok := t.uris[uri]
	t.mu.RUnlock()
	if !ok || owner == upstream {
		return // every read lands here: no write lock for it
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if owner, ok := t.uris[uri]; ok && owner != upstream {
		t.uris[uri] = upstream
	}
}

// gone records that upstream, the owner of uri, no longer has it.
func (t *routes) gone(uri, upstream string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.uris[uri] == upstream {
		delete(t.uris, uri)
		t.size--
	}
}

// paramHeaders returns what is known of a tool's mirrored parameters, and
// whether the tool was seen listed.
func (t *routes) paramHeaders(tool string) []mcp.ParamHeader {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.headers[tool]
}

// candidates returns the upstreams of names to ask for uri (a URI, or the
// text of a template), in order: its owner, then those with a template that
// is or matches it, then the rest. The owner comes first but not alone: a
// resource that moved is found elsewhere (see read).
func (t *routes) candidates(names []string, uri string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(names))
	matched := map[string]bool{}
	if owner, ok := t.uris[uri]; ok && slices.Contains(names, owner) {
		out, matched[owner] = append(out, owner), true
	}
	for _, name := range names {
		if matched[name] {
			continue
		}
		set := t.templates[name]
		if _, same := set[uri]; same {
			out, matched[name] = append(out, name), true
			continue
		}
		for _, tmpl := range set {
			if tmpl.Match(uri) {
				out, matched[name] = append(out, name), true
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
