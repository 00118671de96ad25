// Package namespace maps URIs and names between an upstream's view and the
// merged view Manifold serves.
//
// In prefix mode the upstream's name is prepended to a URI's scheme with a
// '+': `file:///a.md` from upstream `docs` becomes `docs+file:///a.md`, and a
// template `file:///{path}` becomes `docs+file:///{path}`. The result is still
// a valid URI (or RFC 6570 template). A tool or prompt name gets the upstream's
// name and a '_': `search` from `docs` becomes `docs_search`, which stays
// within what LLM APIs accept for function names (letters, digits, '_',
// '-'); upstream names cannot contain '_', so the first one splits. Both
// mappings are reversible without any state, so any replica can route a URI
// or name it has never listed. Only URIs and names are rewritten: in list
// items, in a read's contents, and in the resource links and embedded
// resources of tool results and prompt messages; everything else passes
// through.
//
// In none mode everything passes through unchanged and routing needs another
// source of truth (see package router).
package namespace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// Separator joins an upstream name to the URI scheme; NameSeparator to a
// tool or prompt name.
const (
	Separator     = "+"
	NameSeparator = "_"
)

// Namespace rewrites URIs and names for one mode.
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

// JoinName returns the merged-view name of a tool or prompt of upstream.
func (n Namespace) JoinName(upstream, name string) string {
	if !n.Prefix {
		return name
	}
	return upstream + NameSeparator + name
}

// SplitName parses a merged-view tool or prompt name. ok is false when it
// carries no upstream prefix (always, in none mode).
func (n Namespace) SplitName(name string) (upstream, inner string, ok bool) {
	if !n.Prefix {
		return "", name, false
	}
	upstream, inner, ok = strings.Cut(name, NameSeparator)
	return upstream, inner, ok && upstream != "" && inner != ""
}

// Result rewrites the URIs and names of a result of method from upstream
// into the merged view. Results of other methods are returned unchanged.
func (n Namespace) Result(upstream, method string, result json.RawMessage) (json.RawMessage, error) {
	m, ok := mcp.Lookup(method)
	if !n.Prefix || !ok {
		return result, nil
	}
	switch {
	case m.Items != "":
		return n.items(upstream, m, result)
	case len(m.Blocks) > 0 && bytes.Contains(result, []byte(`"resource`)):
		// Only a result that mentions a resource can hold a link to one.
		out, _, err := n.blocks(upstream, result, m.Blocks)
		if err != nil {
			return nil, fmt.Errorf("%s result: %w", method, err)
		}
		return out, nil
	}
	return result, nil
}

// items rewrites the identifying member of each item of a list (or of a
// read's contents), in one pass over the bytes: a page of hundreds of
// thousands of items costs one new buffer, not a map per item.
func (n Namespace) items(upstream string, m *mcp.Method, result json.RawMessage) (json.RawMessage, error) {
	it, _ := n.Items(upstream, m)
	out, err := jsonrpc.PrefixItems(result, it.List, it.Field, it.Prefix)
	if err != nil {
		return nil, ItemsError(m, err)
	}
	return out, nil
}

// ItemsRewrite is the rewrite Result makes of a result that lists items
// (a read's contents among them): the array member List, the member Field
// of each item, and the Prefix put in front of it
// (jsonrpc.AppendPrefixedItems). The zero value makes none.
type ItemsRewrite struct{ List, Field, Prefix string }

// Items is the ItemsRewrite Result makes of a result of m from upstream,
// for a caller that rewrites as it copies the result anyway; ok is false
// when Result makes none. Upstream names need no JSON escaping.
func (n Namespace) Items(upstream string, m *mcp.Method) (it ItemsRewrite, ok bool) {
	if !n.Prefix || m.Items == "" {
		return it, false
	}
	prefix := upstream + Separator
	if m.ID == "name" {
		prefix = upstream + NameSeparator
	}
	return ItemsRewrite{List: m.Items, Field: m.ID, Prefix: prefix}, true
}

// ItemsError is err, an ItemsRewrite's failure on a result of m, as Result
// reports it.
func ItemsError(m *mcp.Method, err error) error { return fmt.Errorf("%s result: %w", m.Name, err) }

// blocks follows path (object members; arrays are walked through) down to
// content blocks and rewrites the URIs of their resource links and embedded
// resources. It reports whether anything changed, so what did not is
// returned byte for byte.
func (n Namespace) blocks(upstream string, raw json.RawMessage, path []string) (json.RawMessage, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, false, err
		}
		changed := false
		for i, e := range elems {
			out, c, err := n.blocks(upstream, e, path)
			if err != nil {
				return nil, false, err
			}
			elems[i], changed = out, changed || c
		}
		if !changed {
			return raw, false, nil
		}
		b, err := json.Marshal(elems)
		return b, true, err
	}
	if len(raw) == 0 || raw[0] != '{' {
		return raw, false, nil
	}
	obj, err := jsonrpc.ParseObject(raw)
	if err != nil {
		return nil, false, err
	}
	if len(path) == 0 {
		return n.block(upstream, obj, raw)
	}
	sub, ok := obj[path[0]]
	if !ok {
		return raw, false, nil
	}
	out, changed, err := n.blocks(upstream, sub, path[1:])
	if err != nil || !changed {
		return raw, false, err
	}
	obj[path[0]] = out
	return obj.Marshal(), true, nil
}

// block rewrites one content block: the uri of a resource_link, or of the
// resource a `resource` block embeds.
func (n Namespace) block(upstream string, b jsonrpc.Object, raw json.RawMessage) (json.RawMessage, bool, error) {
	switch b.String("type") {
	case "resource_link":
		uri, ok := b.Str("uri")
		if !ok {
			return raw, false, nil
		}
		b["uri"] = jsonrpc.Quote(n.Join(upstream, uri))
	case "resource":
		res, err := b.Object("resource")
		if err != nil {
			return nil, false, err
		}
		uri, ok := res.Str("uri")
		if !ok {
			return raw, false, nil
		}
		res["uri"] = jsonrpc.Quote(n.Join(upstream, uri))
		b["resource"] = res.Marshal()
	default:
		return raw, false, nil
	}
	return b.Marshal(), true, nil
}
