package router

import (
	"encoding/json"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
)

// decorate gives an upstream's result what every result Manifold sends
// must carry: resultType, cache hints for a complete result of a cacheable
// method (a result without them is stale at once and private), and
// Manifold's serverInfo in `_meta`, keeping the upstream's other `_meta`
// members. It is one pass over the result's members, a splice into one new
// buffer: the members it does not touch are copied as they came, never
// decoded and encoded again. (The result already passed the wire layer's
// validation with its message.) The namespace's rewrite of the items a
// result lists (a read's contents), if items names one, is made in the
// same pass, as the list is copied: the bytes are those of decorate and
// then namespace.Namespace.Result, with one buffer instead of two.
func (r *Router) decorate(res json.RawMessage, cacheable bool, items namespace.ItemsRewrite) (json.RawMessage, error) {
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(res, buf[:0])
	if err != nil {
		return nil, err
	}
	var rt, scope, meta []byte
	hasTTL := false
	for _, m := range members {
		switch {
		case jsonrpc.KeyIs(m.Key, "resultType"):
			rt = m.Value
		case jsonrpc.KeyIs(m.Key, "cacheScope"):
			scope = m.Value
		case jsonrpc.KeyIs(m.Key, "ttlMs"):
			hasTTL = true
		case jsonrpc.KeyIs(m.Key, "_meta"):
			meta = m.Value
		}
	}
	// A resultType that is not a string (or an empty one) is none:
	// complete.
	typed := len(rt) > 2 && rt[0] == '"'
	hinted := cacheable && (!typed || jsonrpc.IsString(rt, mcp.ResultTypeComplete))
	private := hinted && !jsonrpc.IsString(scope, mcp.ScopePublic)
	out := make([]byte, 0, len(res)+len(r.serverInfo)+64)
	out = append(out, `{"_meta":`...)
	out = r.appendMeta(out, meta)
	if !typed {
		out = append(out, `,"resultType":"complete"`...)
	}
	if hinted && !hasTTL {
		out = append(out, `,"ttlMs":0`...)
	}
	if private {
		out = append(out, `,"cacheScope":"private"`...)
	}
	skip := append(make([]string, 0, 3), "_meta") // on the stack
	if !typed {
		skip = append(skip, "resultType")
	}
	if private {
		skip = append(skip, "cacheScope")
	}
	if items.List == "" {
		return appendMembersBut(out, true, members, skip...), nil
	}
	return appendMembersRewriting(out, members, skip, items)
}

// appendMembersRewriting is appendMembersBut, out holding a member already,
// with the member named it.List rewritten as it is copied (there is one at
// most: jsonrpc.Members keeps a repeated key once).
func appendMembersRewriting(out []byte, members []jsonrpc.MemberRange, skip []string, it namespace.ItemsRewrite) ([]byte, error) {
	for _, m := range members {
		if keyIn(m.Key, skip) {
			continue
		}
		out = append(append(append(out, ','), m.Key...), ':')
		if !jsonrpc.KeyIs(m.Key, it.List) {
			out = append(out, m.Value...)
			continue
		}
		var err error
		if out, err = jsonrpc.AppendPrefixedItems(out, m.Value, it.Field, it.Prefix); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

// appendMeta appends the result `_meta` meta with Manifold's serverInfo in
// place of any the upstream put there, and without the upstream's own
// MetaCache (only Manifold says an answer came from its cache); a `_meta`
// that is not an object is replaced.
func (r *Router) appendMeta(out, meta []byte) []byte {
	out = append(out, '{')
	out = append(out, r.serverInfo...)
	var buf [8]jsonrpc.MemberRange
	members, err := jsonrpc.Members(meta, buf[:0])
	if err != nil {
		return append(out, '}')
	}
	return appendMembersBut(out, true, members, mcp.MetaServerInfo, MetaCache)
}

// appendMembersBut appends members, but those named in skip, and the
// closing brace to out, an object opened; sep says whether out holds a
// member already.
func appendMembersBut(out []byte, sep bool, members []jsonrpc.MemberRange, skip ...string) []byte {
	for _, m := range members {
		if keyIn(m.Key, skip) {
			continue
		}
		if sep {
			out = append(out, ',')
		}
		sep = true
		out = append(append(append(out, m.Key...), ':'), m.Value...)
	}
	return append(out, '}')
}

func keyIn(lit []byte, keys []string) bool {
	for _, k := range keys {
		if jsonrpc.KeyIs(lit, k) {
			return true
		}
	}
	return false
}
