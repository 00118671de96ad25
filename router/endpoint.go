package router

import (
	"bytes"
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

// MetaWithheld names, in a result's `_meta`, what an endpoint's view left
// out of it: {"items": N, "reason": ...}, never which.
const MetaWithheld = "io.manifold/withheld"

// viewBlocks is res, a result of m whose content blocks may name resources
// (a tool's content, a prompt's messages), as set's view shows it: a
// resource_link or an embedded resource whose URI (in the merged view)
// the view's resource rules leave out is dropped (a prompt's message with
// it), and `_meta` says how many were. A tool the view allows would
// otherwise hand out a resource it denies, text and all. The cache keeps
// the upstream's result whole; each view removes from it on the way out.
func viewBlocks(set *upstream.Set, m *mcp.Method, res json.RawMessage) (json.RawMessage, error) {
	v := set.View()
	if len(m.Blocks) == 0 || !v.Filters(mcp.MethodResourcesRead) || !bytes.Contains(res, []byte(`"resource`)) {
		return res, nil
	}
	denied := func(b jsonrpc.Object) bool {
		uri, ok := "", false
		switch b.String("type") {
		case "resource_link":
			uri, ok = b.Str("uri")
		case "resource":
			r, err := b.Object("resource")
			if err != nil {
				return true
			}
			uri, ok = r.Str("uri")
		default:
			return false
		}
		return !ok || !v.Shows(mcp.MethodResourcesRead, uri)
	}
	obj, err := jsonrpc.ParseObject(res)
	if err != nil {
		return nil, err
	}
	n, err := dropBlocks(obj, m.Blocks, denied)
	if err != nil || n == 0 {
		return res, err
	}
	meta, err := obj.Object("_meta")
	if err != nil {
		meta = jsonrpc.Object{}
	}
	_ = meta.Set(MetaWithheld, map[string]any{"items": n, "reason": "resources this endpoint does not serve"})
	obj["_meta"] = meta.Marshal()
	return obj.Marshal(), nil
}

// dropBlocks follows path (object members, arrays walked through) from
// obj down to content blocks and leaves out those denied: an element of an
// array of blocks, or an array's element (a prompt's message) whose one
// block is. It returns how many it left out; obj is changed in place.
func dropBlocks(obj jsonrpc.Object, path []string, denied func(jsonrpc.Object) bool) (int, error) {
	raw, ok := obj[path[0]]
	if !ok {
		return 0, nil
	}
	elems, err := jsonrpc.Elements(raw)
	if err != nil {
		return 0, nil // not an array: nothing to walk
	}
	kept := elems[:0:0]
	n := 0
	for _, e := range elems {
		el, err := jsonrpc.ParseObject(e)
		if err != nil {
			kept = append(kept, e)
			continue
		}
		if len(path) == 1 {
			if denied(el) {
				n++
				continue
			}
			kept = append(kept, e)
			continue
		}
		if block, err := el.Object(path[1]); err == nil && len(path) == 2 && denied(block) {
			n++ // a message whose one block is denied
			continue
		}
		d, err := dropBlocks(el, path[1:], denied)
		if err != nil {
			return 0, err
		}
		if d > 0 {
			e = el.Marshal()
		}
		n += d
		kept = append(kept, e)
	}
	if n > 0 {
		b, err := json.Marshal(kept)
		if err != nil {
			return 0, err
		}
		obj[path[0]] = b
	}
	return n, nil
}
