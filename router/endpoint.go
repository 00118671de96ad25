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
	return filterPage(list, page, v.Shows)
}

// filterPage is page of list with only the items whose identity shows
// admits, spliced at byte level (jsonrpc.FilterItems): a page that loses
// nothing is returned as it is.
func filterPage(list string, page json.RawMessage, shows func(list, id string) bool) (json.RawMessage, error) {
	m, _ := mcp.Lookup(list)
	return jsonrpc.FilterItems(page, m.Items, func(item json.RawMessage) (bool, error) {
		id, _ := jsonrpc.MemberString(item, m.ID)
		return shows(list, id), nil
	})
}
