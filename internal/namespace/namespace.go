// Package namespace maps resource URIs between an upstream's view and the
// merged view Manifold serves.
//
// In prefix mode the upstream's name is prepended to the URI scheme with a
// '+': `file:///a.md` from upstream `docs` becomes `docs+file:///a.md`, and a
// template `file:///{path}` becomes `docs+file:///{path}`. The result is still
// a valid URI (or RFC 6570 template), the mapping is reversible without any
// state, and any replica can route a URI it has never listed: the part before
// the first '+' names the upstream, the rest is the upstream's own URI. Only
// URIs are rewritten; names, titles and everything else pass through.
//
// In none mode URIs pass through unchanged and routing needs another source
// of truth (see package router).
package namespace

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// Separator joins an upstream name to the URI scheme.
const Separator = "+"

// Namespace rewrites URIs for one mode.
type Namespace struct {
	// Prefix is true in prefix mode, false in none mode.
	Prefix bool
}

// Join returns the merged-view URI of uri from upstream.
func (n Namespace) Join(upstream, uri string) string {
	if !n.Prefix {
		return uri
	}
	return upstream + Separator + uri
}

// Split parses a merged-view URI into its upstream and the upstream's own
// URI. ok is false when uri carries no upstream prefix (always, in none mode).
func (n Namespace) Split(uri string) (upstream, inner string, ok bool) {
	if !n.Prefix {
		return "", uri, false
	}
	scheme, _, hasColon := strings.Cut(uri, ":")
	name, _, hasSep := strings.Cut(scheme, Separator)
	if !hasColon || !hasSep || name == "" {
		return "", "", false
	}
	return name, uri[len(name)+len(Separator):], true
}

// Result rewrites the URIs of a result of method from upstream into the
// merged view. Results of other methods are returned unchanged.
func (n Namespace) Result(upstream, method string, result json.RawMessage) (json.RawMessage, error) {
	if !n.Prefix {
		return result, nil
	}
	m, ok := mcp.Lookup(method)
	if !ok || m.Items == "" || m.ID == "name" { // names are not URIs: tools and prompts keep theirs
		return result, nil
	}
	list, field := m.Items, m.ID
	obj, err := jsonrpc.ParseObject(result)
	if err != nil {
		return nil, fmt.Errorf("%s result: %w", method, err)
	}
	if _, ok := obj[list]; !ok {
		return result, nil // input_required, or a result without items
	}
	var items []jsonrpc.Object
	if _, err := obj.Get(list, &items); err != nil {
		return nil, fmt.Errorf("%s result: %w", method, err)
	}
	for i, item := range items {
		var uri string
		if _, err := item.Get(field, &uri); err != nil || uri == "" {
			return nil, fmt.Errorf("%s result: %s[%d] has no %s", method, list, i, field)
		}
		if err := item.Set(field, n.Join(upstream, uri)); err != nil {
			return nil, err
		}
	}
	if err := obj.Set(list, items); err != nil {
		return nil, err
	}
	return obj.Marshal(), nil
}
