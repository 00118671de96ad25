package router

import (
	"encoding/json"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/uritemplate"
	"github.com/manifold-mcp/manifold/upstream"
)

// routes is what a Router knows of one configured set of upstreams from
// the list pages that pass through it: without namespaces, which upstreams
// serve which URI, template, tool or prompt name; in either mode, which
// tool parameters are mirrored in headers, and (once listed whole) which
// names an upstream serves at all. It lives in the set's memo
// (upstream.Set.Memo), so a reload starts it anew, and every view of the
// set (a caller's, under access rules) shares it: an identity two upstreams
// list belongs, for each caller, to the first in configuration order among
// those it may see. The tables are bounded together; past the bound,
// routing falls back to asking upstreams in order (URIs) or to listing
// again (names), which gives the same answer more slowly.
type routes struct {
	log *slog.Logger
	// byURI: learn which upstream serves which URI and template (needed
	// without namespaces only, where a URI names no upstream).
	byURI bool
	order []string // the configured set's names: who comes first

	mu        sync.RWMutex
	uris      map[string]string                           // URI, or template text → the upstream that owns it
	names     map[string]map[string][]string              // list method → name → upstreams listing it, in order
	whole     map[string]map[string]bool                  // list method → upstream → listed whole (learn)
	templates map[string]map[string]*uritemplate.Template // upstream → text → template
	headers   map[string][]mcp.ParamHeader                // upstream + "\x00" + merged-view tool name → its mirrored params
	collided  map[string]bool                             // identities whose collision was logged
	lastWhole map[string]wholePage                        // list method + "\x00" + upstream → its last whole list
	size      int

	learning marks // on-demand listings, by upstream and list
}

// maxRoutes bounds everything learnt together.
const maxRoutes = 200_000

func newRoutes(log *slog.Logger, byURI bool, order []string) *routes {
	return &routes{log: log, byURI: byURI, order: order, uris: map[string]string{}, names: map[string]map[string][]string{},
		whole: map[string]map[string]bool{}, templates: map[string]map[string]*uritemplate.Template{},
		headers: map[string][]mcp.ParamHeader{}, collided: map[string]bool{}, lastWhole: map[string]wholePage{}}
}

// routesKey is the routes' key in a set's memo.
type routesKey struct{}

// routesOf returns the routes of the configured set that set is (a view
// of).
func (r *Router) routesOf(set *upstream.Set) *routes {
	return set.Memo(routesKey{}, func(root *upstream.Set) any {
		return newRoutes(r.log, !r.ns.Prefix, root.Names())
	}).(*routes)
}

// viewRoutes are a set's routes as merge sees them for one caller's view.
type viewRoutes struct {
	t    *routes
	view []string
	// filter is the endpoint's view, whose globs may have left items out
	// of a page: such a page tells what the upstream lists, not what it
	// lists no more.
	filter *upstream.View
}

func (v viewRoutes) Observe(upstream, method string, items json.RawMessage, whole bool) {
	v.t.observe(upstream, method, items, whole && !v.filter.Filters(method))
}

func (v viewRoutes) Owner(method, id string) (string, bool) {
	if method == mcp.MethodResourcesList || method == mcp.MethodTemplatesList {
		return v.t.uriOwner(v.view, id)
	}
	return v.t.owner(v.view, method, id)
}

// observe learns from one upstream's list page, in the merged view; whole
// says it is the upstream's whole list, which tells what it lists no more.
func (t *routes) observe(upstream, method string, list json.RawMessage, whole bool) {
	if !t.byURI && (method == mcp.MethodResourcesList || method == mcp.MethodTemplatesList) {
		return
	}
	items, err := jsonrpc.Elements(list)
	if err != nil {
		return
	}
	if whole {
		t.forgetUnlisted(upstream, method, list, items)
	}
	t.observeItems(upstream, method, items)
}

// A wholePage is what an upstream's whole list said last: its bytes' sum,
// and the identities it listed.
type wholePage struct {
	sum uint64
	ids []string
}

var pageSeed = maphash.MakeSeed()

// forgetUnlisted forgets what upstream listed in the whole list it gave
// before and lists no more in items, its whole list now: a URI or template
// it owned (which another upstream may own now: a resource that moved),
// or its place among a name's listers. Otherwise an identity once listed
// by an earlier upstream in configuration order stayed its own, and the
// merged list left out the upstream that lists it now. A list the same as
// the last, byte for byte (a cached page), costs its hash alone.
func (t *routes) forgetUnlisted(upstream, method string, list json.RawMessage, items []json.RawMessage) {
	key := method + "\x00" + upstream
	sum := maphash.Bytes(pageSeed, list)
	t.mu.RLock()
	prev, known := t.lastWhole[key]
	t.mu.RUnlock()
	if known && prev.sum == sum {
		return
	}
	m, _ := mcp.Lookup(method)
	ids := make([]string, len(items))
	listed := make(map[string]bool, len(items))
	for i, item := range items {
		ids[i], _ = jsonrpc.MemberString(item, m.ID)
		listed[ids[i]] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range prev.ids {
		if !listed[id] {
			t.unlist(method, id, upstream)
		}
	}
	t.lastWhole[key] = wholePage{sum: sum, ids: ids}
}

// unlist records that upstream lists id in method no more; t.mu is held.
func (t *routes) unlist(method, id, upstream string) {
	switch method {
	case mcp.MethodResourcesList, mcp.MethodTemplatesList:
		if t.uris[id] == upstream {
			delete(t.uris, id)
			t.size--
		}
	default:
		if listers := t.names[method][id]; slices.Contains(listers, upstream) {
			t.names[method][id] = slices.DeleteFunc(slices.Clone(listers), func(u string) bool { return u == upstream })
			t.size--
		}
	}
}

func (t *routes) observeItems(upstream, method string, items []json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch method {
	case mcp.MethodResourcesList:
		for _, item := range items {
			uri, _ := jsonrpc.MemberString(item, "uri")
			t.own(uri, upstream)
		}
	case mcp.MethodTemplatesList:
		t.learnTemplates(upstream, items)
		for _, item := range items {
			text, _ := jsonrpc.MemberString(item, "uriTemplate")
			t.own(text, upstream)
		}
	case mcp.MethodToolsList, mcp.MethodPromptsList:
		for _, item := range items {
			name, _ := jsonrpc.MemberString(item, "name")
			t.list(method, name, upstream)
			if method == mcp.MethodToolsList {
				t.learnHeaders(upstream, name, item)
			}
		}
	}
}

// relist records that upstream's whole list is items (every page, read by
// learn): the names it lists no more are forgotten, and a name it does not
// list is known not to be its.
func (t *routes) relist(upstream, method string, items []json.RawMessage) {
	listed := map[string]bool{}
	for _, item := range items {
		name, _ := jsonrpc.MemberString(item, "name")
		listed[name] = true
	}
	t.mu.Lock()
	for name, listers := range t.names[method] {
		if !listed[name] && slices.Contains(listers, upstream) {
			t.names[method][name] = slices.DeleteFunc(slices.Clone(listers), func(u string) bool { return u == upstream })
			t.size--
		}
	}
	if t.whole[method] == nil {
		t.whole[method] = map[string]bool{}
	}
	t.whole[method][upstream] = true
	t.mu.Unlock()
	t.observeItems(upstream, method, items)
}

// list records that upstream lists name in method, keeping the listers in
// configuration order; t.mu is held.
func (t *routes) list(method, name, upstream string) {
	byName := t.names[method]
	if byName == nil {
		byName = map[string][]string{}
		t.names[method] = byName
	}
	listers := byName[name]
	if slices.Contains(listers, upstream) || t.size >= maxRoutes {
		return
	}
	if len(listers) > 0 {
		t.logCollision(name, listers[0], upstream)
	}
	listers = append(slices.Clone(listers), upstream)
	slices.SortStableFunc(listers, func(a, b string) int { return slices.Index(t.order, a) - slices.Index(t.order, b) })
	byName[name] = listers
	t.size++
}

// own records upstream as the owner of uri unless an upstream earlier in
// configuration order owns it; t.mu is held.
func (t *routes) own(uri, upstream string) {
	owner, known := t.uris[uri]
	switch {
	case known && owner == upstream:
	case known && slices.Index(t.order, upstream) < slices.Index(t.order, owner):
		t.uris[uri] = upstream
		t.logCollision(uri, upstream, owner)
	case known:
		t.logCollision(uri, owner, upstream)
	case t.size < maxRoutes:
		t.uris[uri] = upstream
		t.size++
	}
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
func (t *routes) learnHeaders(upstream, name string, raw json.RawMessage) {
	key := upstream + "\x00" + name
	if !mcp.MayMirror(raw) {
		delete(t.headers, key) // the common case, decoded no further
		return
	}
	hs, err := paramHeadersOf(raw)
	if err != nil || len(hs) == 0 {
		delete(t.headers, key)
		return
	}
	if _, ok := t.headers[key]; !ok && len(t.headers) >= maxRoutes {
		return
	}
	t.headers[key] = hs
}

// logCollision logs a collision once per identity; t.mu is held.
func (t *routes) logCollision(id, kept, dropped string) {
	if t.collided[id] || len(t.collided) >= maxRoutes {
		return
	}
	t.collided[id] = true
	t.log.Warn("two upstreams list the same identity; calls go to the first in configuration order", "id", id, "routedTo", kept, "alsoListedBy", dropped)
}

// owner returns the first upstream of view (a caller's, in configuration
// order) that lists name in list, if one is known to.
func (t *routes) owner(view []string, list, name string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, u := range t.names[list][name] {
		if slices.Contains(view, u) {
			return u, true
		}
	}
	return "", false
}

// uriOwner returns the upstream of view that owns uri, if one is known to.
func (t *routes) uriOwner(view []string, uri string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	owner, ok := t.uris[uri]
	return owner, ok && slices.Contains(view, owner)
}

// listedWhole reports whether upstream's list was read whole.
func (t *routes) listedWhole(upstream, list string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.whole[list][upstream]
}

// unlisted reports whether upstream is known not to serve name in list:
// its list was read whole, and name was not in it.
func (t *routes) unlisted(upstream, list, name string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.whole[list][upstream] && !slices.Contains(t.names[list][name], upstream)
}

// served records that upstream answered a read of uri by a caller who
// sees the upstreams seen: a resource found away from its recorded owner,
// which that caller could see, has moved, and the new place owns it.
func (t *routes) served(uri, upstream string, seen []string) {
	t.mu.RLock()
	owner, ok := t.uris[uri]
	t.mu.RUnlock()
	if !ok || owner == upstream || !slices.Contains(seen, owner) {
		// Every read lands here: no write lock for it. And an owner the
		// reader could not see (its endpoint or access rules hide it) is
		// still the owner for everyone else.
		return
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

// paramHeaders returns what is known of the mirrored parameters of
// upstream's tool (by its merged-view name).
func (t *routes) paramHeaders(upstream, tool string) []mcp.ParamHeader {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.headers[upstream+"\x00"+tool]
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
