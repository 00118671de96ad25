package router

import (
	"encoding/json"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
)

// An endpoint's view (upstream.View) reaches the router as part of the set
// of upstreams a request is served from (callersSet, Set.In): the set holds
// the view's upstreams only, so routing by prefix or by what the lists
// said finds no other; and the set knows the view, whose globs the router
// applies where names and URIs come in (byName, complete, read) and where
// lists go out (viewPage). Upstream pages and reads are cached as before,
// shared by every view: a view only ever removes from them, after the
// cache. A merged page is made per request and never cached, and its
// cursor names the view (merge.ListIn), so one view's listing is never
// continued in another.

// cursorView is the name a set's view gives its cursors: "" for the main
// endpoint's.
func cursorView(set *upstream.Set) string {
	if v := set.View(); v != nil {
		return v.Path
	}
	return ""
}

// viewPage is one upstream's page of list as set's view shows it: the
// items whose identity (a namespaced name, URI or template) its globs
// leave out are removed. The page is the cache's copy: it is not changed.
func viewPage(set *upstream.Set, list string, page json.RawMessage) (json.RawMessage, error) {
	v := set.View()
	if !v.Filters(list) {
		return page, nil
	}
	m, _ := mcp.Lookup(list)
	obj, err := jsonrpc.ParseObject(page)
	if err != nil {
		return nil, err
	}
	items, err := jsonrpc.Elements(obj[m.Items])
	if err != nil || items == nil {
		return page, err
	}
	kept := make([]json.RawMessage, 0, len(items))
	for _, item := range items {
		if id, _ := jsonrpc.MemberString(item, m.ID); v.Shows(list, id) {
			kept = append(kept, item)
		}
	}
	if len(kept) == len(items) {
		return page, nil
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	obj[m.Items] = b
	return obj.Marshal(), nil
}
