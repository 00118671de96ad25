package router

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/upstream"
)

// The search catalog. An endpoint of `catalog: search` (upstream.View's
// Search) lists two tools in place of its tools: find_tools, which finds
// by words among every tool the endpoint shows the caller
// (internal/catalog), and call_tool, which calls one of them by name: it
// is tools/call of that name, through byName like any call, so routing,
// the view's globs, access rules, consent, the tool cache, progress and
// held calls are the same. A real tool's name keeps working in tools/call.
//
// The index is built from the caller's own merged tools/list, read as any
// list is (through the cache, per caller where an upstream's lists are
// private, with the connect tools of its unconsented upstreams), and kept
// while that list stays the same: a changed list, or a caller whose list
// differs, has an index of its own. Indexes are shared by the digest of
// the list they were built from, never by caller, so two callers share one
// only when they see the very same tools.

// The bounds of a search: the merged pages read for one index, the tools
// indexed, and the indexes kept, in number and in tools all told (an
// index holds about 750 bytes a tool: BENCHMARKS.md).
const (
	maxCatalogPages = 100
	maxCatalogTools = 20_000
	maxCatalogBytes = 32 << 20 // of definitions, which an upstream sizes
	maxIndexes      = 64
	maxKeptTools    = 100_000
	maxKeptBytes    = 64 << 20
)

// searchedTools answers tools/list and tools/call at a search endpoint; ok
// is false for a request it leaves to route (a call of a real tool).
func (r *Router) searchedTools(ctx context.Context, set *upstream.Set, m *mcp.Method, req *mcp.Request, n *Note) (res json.RawMessage, err error, ok bool) {
	if m.Name == mcp.MethodToolsList {
		if req.Params["cursor"] != nil {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid cursor"), true
		}
		return r.catalogPage(), nil, true
	}
	switch name, _ := req.Params.Str("name"); name {
	case catalog.FindTools:
		res, err = r.findTools(ctx, set, req, n)
		return res, err, true
	case catalog.CallTool:
		res, err = r.callTool(ctx, set, m, req, n)
		return res, err, true
	}
	return nil, nil, false
}

// catalogPage is a search endpoint's tools/list: the same two tools for
// every caller, whatever the upstreams hold.
func (r *Router) catalogPage() json.RawMessage {
	b := make([]byte, 0, 128+len(r.meta)+len(catalogTools))
	b = append(b, `{"_meta":`...)
	b = append(b, r.meta...)
	b = fmt.Appendf(b, `,"resultType":"complete","cacheScope":"public","ttlMs":%d,"tools":`, DiscoverTTL)
	b = append(b, catalogTools...)
	return append(b, '}')
}

// catalogTools is the two tools' definitions as a JSON array, written once.
var catalogTools, _ = json.Marshal(catalog.Tools())

// findTools answers find_tools: the best matches of its query among the
// caller's tools, whole, in structuredContent, with a line each as text.
func (r *Router) findTools(ctx context.Context, set *upstream.Set, req *mcp.Request, n *Note) (json.RawMessage, error) {
	args, err := req.Params.Object("arguments")
	if err != nil && req.Params["arguments"] != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "find_tools: arguments must be an object")
	}
	query, ok := args.Str("query")
	if !ok || query == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "find_tools: arguments.query must be a non-empty string")
	}
	limit := 0
	if raw := args["limit"]; raw != nil {
		if err := json.Unmarshal(raw, &limit); err != nil || limit < 1 {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "find_tools: arguments.limit must be a positive integer")
		}
	}
	ix, err := r.catalogIndex(ctx, set, req, n)
	if err != nil {
		return nil, err
	}
	found := ix.Find(query, limit)
	if found == nil {
		found = []json.RawMessage{}
	}
	b, err := json.Marshal(map[string]any{
		"content":           []any{map[string]string{"type": "text", "text": catalog.Summary(found)}},
		"structuredContent": map[string]any{"tools": found},
		"isError":           false,
	})
	if err != nil {
		return nil, fmt.Errorf("find_tools: %w", err)
	}
	return r.decorate(b, false, namespace.ItemsRewrite{})
}

// callTool answers call_tool: tools/call of arguments.name with
// arguments.arguments, everything else of the request (its _meta, a held
// call's state) as it came.
func (r *Router) callTool(ctx context.Context, set *upstream.Set, m *mcp.Method, req *mcp.Request, n *Note) (json.RawMessage, error) {
	args, err := req.Params.Object("arguments")
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "call_tool: arguments must be an object with the tool's name")
	}
	name, ok := args.Str("name")
	if !ok || name == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "call_tool: arguments.name must be the name of a tool find_tools found")
	}
	if name == catalog.FindTools || name == catalog.CallTool {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "call_tool calls a tool find_tools found, not %s", name)
	}
	sub := *req
	sub.Params = req.Params.Clone()
	sub.Params["name"] = jsonrpc.Quote(name)
	delete(sub.Params, "arguments")
	if inner := args["arguments"]; inner != nil {
		if _, err := jsonrpc.ParseObject(inner); err != nil {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "call_tool: arguments.arguments must be an object")
		}
		sub.Params["arguments"] = inner
	}
	return r.byName(ctx, set, m, &sub, n)
}

// catalogIndex is the index of the caller's merged tools/list.
func (r *Router) catalogIndex(ctx context.Context, set *upstream.Set, req *mcp.Request, n *Note) (*catalog.Index, error) {
	tools, err := r.allTools(ctx, set, req, n)
	if err != nil {
		return nil, err
	}
	h, size := sha256.New(), 0
	for _, t := range tools {
		size += len(t)
		_, _ = h.Write(t)
		_, _ = h.Write([]byte{0})
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return r.indexes.get(key, size, func() *catalog.Index { return catalog.Build(tools) }), nil
}

// allTools reads the caller's merged tools/list to its end, as a client
// listing it would (the request's headers and version go with each page).
func (r *Router) allTools(ctx context.Context, set *upstream.Set, req *mcp.Request, n *Note) ([]json.RawMessage, error) {
	var tools []json.RawMessage
	cursor, size := json.RawMessage(nil), 0
	for range maxCatalogPages {
		page := *req
		page.Method, page.Params, page.Meta = mcp.MethodToolsList, jsonrpc.Object{}, jsonrpc.Object{}
		if cursor != nil {
			page.Params["cursor"] = cursor
		}
		res, err := r.list(ctx, set, toolsList, &page, n)
		if err != nil {
			return nil, err
		}
		// Read at byte level (the merged page is Manifold's own, valid
		// JSON): decoding it whole was half of a find_tools.
		items, _ := jsonrpc.Member(res, "tools")
		listed, err := jsonrpc.Elements(items)
		if err != nil {
			return nil, fmt.Errorf("find_tools: the merged tools/list: %w", err)
		}
		tools = append(tools, listed...)
		if len(tools) > maxCatalogTools {
			return tools[:maxCatalogTools], nil
		}
		if size += len(items); size > maxCatalogBytes {
			return tools, nil
		}
		next, ok := jsonrpc.Member(res, "nextCursor")
		if !ok {
			return tools, nil
		}
		cursor = next
	}
	return tools, nil
}

// indexes keeps the indexes last built, by the digest of their list, the
// least recently used dropped beyond maxIndexes, maxKeptTools tools or
// maxKeptBytes of definitions.
type indexes struct {
	mu    sync.Mutex
	order *list.List // of *indexEntry, most recent first
	by    map[[sha256.Size]byte]*list.Element
	tools int // in the kept indexes
	bytes int // of the definitions they were built from
}

type indexEntry struct {
	key  [sha256.Size]byte
	ix   *catalog.Index
	size int // bytes of definitions
}

func newIndexes() *indexes {
	return &indexes{order: list.New(), by: map[[sha256.Size]byte]*list.Element{}}
}

// get returns the index of key, built (outside the lock) if it is not
// kept; two callers building the same index at once both build it.
func (c *indexes) get(key [sha256.Size]byte, size int, build func() *catalog.Index) *catalog.Index {
	c.mu.Lock()
	if e, ok := c.by[key]; ok {
		c.order.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*indexEntry).ix
	}
	c.mu.Unlock()
	ix := build()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.by[key]; !ok {
		c.by[key] = c.order.PushFront(&indexEntry{key, ix, size})
		c.tools, c.bytes = c.tools+ix.Len(), c.bytes+size
		for c.order.Len() > maxIndexes || (c.tools > maxKeptTools || c.bytes > maxKeptBytes) && c.order.Len() > 1 {
			old := c.order.Remove(c.order.Back()).(*indexEntry)
			delete(c.by, old.key)
			c.tools, c.bytes = c.tools-old.ix.Len(), c.bytes-old.size
		}
	}
	return ix
}
