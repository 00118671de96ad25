package router

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/upstream"
)

// byName routes a tools/call or prompts/get to the upstream that serves
// params.name, with the upstream's own name. Such calls are never retried
// once sent, and never cached or collapsed with another caller's, but for
// the read-only tools an operator's policy caches (toolcache.go).
func (r *Router) byName(ctx context.Context, set *upstream.Set, m *mcp.Method, req *mcp.Request, n *Note) (json.RawMessage, error) {
	name, ok := req.Params.Str("name")
	if !ok {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.name must be a string")
	}
	if u := connectOf(set, name); u != nil && m.Name == mcp.MethodToolsCall {
		if res, own, err := r.connect(ctx, u, name, n); !own {
			return res, err
		}
	}
	if !set.View().Shows(m.Names, name) {
		return nil, unknownName(m.Names, name)
	}
	u, inner := r.nameOwner(ctx, set, m.Names, name)
	if u == nil {
		return nil, unknownName(m.Names, name)
	}
	sub := *req
	sub.Params = req.Params.Clone()
	sub.Params["name"] = jsonrpc.Quote(inner)
	if m.Name == mcp.MethodToolsCall {
		hs, err := r.paramHeaders(ctx, set, u, name, req)
		if err != nil {
			return nil, err
		}
		sub.ParamHeaders = hs
	}
	tc := r.toolPolicy(ctx, set, m, u, name, inner, &sub)
	res, err := r.answer(ctx, hop{u: u, m: m, req: &sub, note: n, tool: tc})
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeInvalidParams && r.unknownTo(ctx, set, u, m.Names, name) {
		return nil, unknownName(m.Names, name)
	}
	if err != nil {
		return nil, err
	}
	return viewBlocks(set, m, res)
}

// complete routes a completion/complete by its ref: a prompt by name, a
// resource or template by URI.
func (r *Router) complete(ctx context.Context, set *upstream.Set, m *mcp.Method, req *mcp.Request, n *Note) (json.RawMessage, error) {
	ref, err := req.Params.Object("ref")
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.ref must be an object")
	}
	var u *upstream.Upstream
	var member, id, inner string
	switch ref.String("type") {
	case "ref/prompt":
		member, id = "name", ref.String("name")
		if !set.View().Shows(mcp.MethodPromptsList, id) {
			return nil, unknownName(mcp.MethodPromptsList, id)
		}
		if u, inner = r.nameOwner(ctx, set, mcp.MethodPromptsList, id); u == nil {
			return nil, unknownName(mcp.MethodPromptsList, id)
		}
	case "ref/resource":
		member, id = "uri", ref.String("uri")
		if !set.View().Shows(mcp.MethodResourcesList, id) {
			return nil, notFound(id, "no upstream serves this URI prefix")
		}
		if u, inner = r.uriOwner(set, id); u == nil {
			return nil, notFound(id, "no upstream serves this URI prefix")
		}
	default:
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, `params.ref.type must be "ref/prompt" or "ref/resource"`)
	}
	ref[member] = jsonrpc.Quote(inner)
	sub := *req
	sub.Params = req.Params.Clone()
	sub.Params["ref"] = ref.Marshal()
	return r.answer(ctx, hop{u: u, m: m, req: &sub, note: n})
}

// answer is h's answer for the caller: fetched, a failure to get one made
// an error for the caller, a cached tool result presented (toolcache.go).
// A call to a server that may ask questions in the middle of it is held
// when it does (bridge.go); the retry of a held call resumes it. A cached
// call is never held: a tool that asks is not one whose result is shared.
func (r *Router) answer(ctx context.Context, h hop) (json.RawMessage, error) {
	switch {
	case h.tool != nil:
		res, err := r.fetch(ctx, h)
		if err != nil {
			return nil, r.callerError(h, err)
		}
		return h.tool.present(res)
	case held(h.req):
		return r.holds.resume(ctx, h.req)
	case !h.u.MayAsk(h.req, how(h.m, h.req, false, false)):
		res, err := r.fetch(ctx, h)
		return res, r.callerError(h, err)
	}
	return r.holds.start(ctx, h.req, func(hctx context.Context, ask mcp.Ask) (json.RawMessage, error) {
		sub := *h.req
		sub.Ask = ask
		asked := h // h is captured, not changed: the closure holds a copy
		asked.req = &sub
		res, err := r.fetch(hctx, asked)
		return res, r.callerError(asked, err)
	})
}

// callerError is err, h's failure to get an answer, as the caller is told
// it; an answer the upstream gave (or nil) passes as it is.
func (r *Router) callerError(h hop, err error) error {
	var ue *unavailableError
	if errors.As(err, &ue) {
		// The upstream's health record logs failures as a summary.
		r.log.Debug("call failed", "upstream", h.u.Name(), "method", h.req.Method, "err", ue.err)
		return ue.rpc()
	}
	return err
}

// nameOwner finds the upstream serving the merged-view name in list, and
// its own name for it: by prefix, or (without namespaces) by what the list
// pages said, listing again once if they said nothing. A name the
// upstream's filter hides is unknown.
func (r *Router) nameOwner(ctx context.Context, set *upstream.Set, list, name string) (*upstream.Upstream, string) {
	routes := r.routesOf(set)
	var u *upstream.Upstream
	inner := name
	if r.ns.Prefix {
		up, in, ok := r.ns.SplitName(name)
		if !ok {
			return nil, ""
		}
		u, inner = set.Get(up), in
	} else {
		owner, ok := routes.owner(set.Names(), list, name)
		if !ok {
			r.learn(ctx, set, set.All(), list)
			owner, ok = routes.owner(set.Names(), list, name)
		}
		if ok {
			u = set.Get(owner)
		}
	}
	if u == nil || !u.Exposes(list, inner) {
		return nil, ""
	}
	return u, inner
}

// unknownTo reports whether u's whole list lacks name (listing it if that
// is not known yet): then an upstream's refusal of a call of name is
// Manifold's "unknown", in the caller's words rather than the upstream's.
func (r *Router) unknownTo(ctx context.Context, set *upstream.Set, u *upstream.Upstream, list, name string) bool {
	routes := r.routesOf(set)
	if !routes.listedWhole(u.Name(), list) || routes.unlisted(u.Name(), list, name) {
		r.learn(ctx, set, []*upstream.Upstream{u}, list)
	}
	return routes.unlisted(u.Name(), list, name)
}

// uriOwner finds the upstream of a merged-view URI or template.
func (r *Router) uriOwner(set *upstream.Set, uri string) (*upstream.Upstream, string) {
	if r.ns.Prefix {
		up, inner, ok := r.ns.Split(uri)
		if !ok {
			return nil, ""
		}
		return set.Get(up), inner
	}
	if c := r.routesOf(set).candidates(set.Names(), uri); len(c) > 0 {
		return set.Get(c[0]), uri
	}
	return nil, ""
}

// paramHeaders checks the caller's Mcp-Param-* headers against the
// arguments of a tool call (when the caller's transport has headers) and
// returns the headers a modern upstream must get, as u's list says (which
// is read once, if it was not yet).
func (r *Router) paramHeaders(ctx context.Context, set *upstream.Set, u *upstream.Upstream, tool string, req *mcp.Request) (http.Header, error) {
	routes := r.routesOf(set)
	if !routes.listedWhole(u.Name(), mcp.MethodToolsList) {
		r.learn(ctx, set, []*upstream.Upstream{u}, mcp.MethodToolsList)
	}
	hs := routes.paramHeaders(u.Name(), tool)
	if len(hs) == 0 {
		return nil, nil
	}
	args, err := req.Params.Object("arguments")
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.arguments must be an object")
	}
	out := http.Header{}
	for _, h := range hs {
		value, present, err := h.HeaderValue(args[h.Param])
		if err != nil {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "arguments.%s: %v", h.Param, err)
		}
		if req.Mirror != nil {
			check := req.Mirror.Absent(h.Header)
			if present {
				check = req.Mirror.Check(h.Header, value)
			}
			if check != nil {
				return nil, check
			}
		}
		if present {
			out.Set(h.Header, mcp.EncodeHeader(value))
		}
	}
	return out, nil
}

// learnPages bounds the pages one on-demand listing reads of an upstream.
const learnPages = 20

// learn lists list on each of ups (every page, through the cache) so the
// set's routes know their names, at most once a second per upstream and
// list: calls of names nobody lists must not list again each time. An
// upstream listed to its end is known whole.
func (r *Router) learn(ctx context.Context, set *upstream.Set, ups []*upstream.Upstream, list string) {
	routes := r.routesOf(set)
	m, _ := mcp.Lookup(list)
	for _, u := range ups {
		if !routes.learning.allow(u.Name()+"\x00"+list, time.Second) {
			continue
		}
		var all []json.RawMessage
		r.eachPage(ctx, u, m, nil, func(items []json.RawMessage, last bool) {
			all = append(all, items...)
			if last {
				routes.relist(u.Name(), list, all)
			} else {
				routes.observeItems(u.Name(), list, items)
			}
		})
	}
}

// eachPage lists m on u (every page, at most learnPages, through the
// cache, with header for an upstream that wants the caller's credential,
// unnoted: Manifold's own listing is not the request's answer) and hands
// each page's items to page, saying whether it is the last; it reports
// whether the list was read to its end.
func (r *Router) eachPage(ctx context.Context, u *upstream.Upstream, m *mcp.Method, header http.Header, page func(items []json.RawMessage, last bool)) bool {
	req := &mcp.Request{Method: m.Name, Params: jsonrpc.Object{}, Meta: jsonrpc.Object{}, Header: header}
	for range learnPages {
		obj, next, err := r.listPage(ctx, hop{u: u, m: m, req: req})
		if err != nil {
			return false
		}
		items, _ := jsonrpc.Elements(obj[m.Items])
		page(items, next == "")
		if next == "" {
			return true
		}
		req = &mcp.Request{Method: m.Name, Params: jsonrpc.Object{"cursor": jsonrpc.Quote(next)}, Meta: jsonrpc.Object{}, Header: header}
	}
	return false
}

// learnWhole is learn of the upstreams of ups not yet listed whole.
func (r *Router) learnWhole(ctx context.Context, set *upstream.Set, list string) {
	routes := r.routesOf(set)
	var ups []*upstream.Upstream
	for _, u := range set.All() {
		if !routes.listedWhole(u.Name(), list) {
			ups = append(ups, u)
		}
	}
	if len(ups) > 0 {
		r.learn(ctx, set, ups, list)
	}
}

// listPage is the page h asks for, through the cache, and its next cursor.
func (r *Router) listPage(ctx context.Context, h hop) (jsonrpc.Object, string, error) {
	res, err := r.fetch(ctx, h)
	if err != nil {
		return nil, "", err
	}
	obj, err := jsonrpc.ParseObject(res)
	if err != nil {
		return nil, "", err
	}
	return obj, obj.String("nextCursor"), nil
}

// unknownName is the answer for a tool or prompt no upstream serves.
func unknownName(list, name string) *jsonrpc.Error {
	kind := strings.TrimSuffix(strings.TrimSuffix(list, "/list"), "s")
	return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "unknown %s %q", kind, name).WithData(map[string]string{"name": name})
}

// shapeList makes one upstream's tools or prompts page what callers may
// see: the names its filter hides left out, and tools whose x-mcp-header
// annotations are invalid left out with a warning (clients would drop them
// anyway, and could not call them correctly). One pass over the page's
// bytes: a tool is decoded only if it may carry an annotation, and a page
// that loses nothing is returned as it is.
func (r *Router) shapeList(u *upstream.Upstream, m *mcp.Method, result json.RawMessage) (json.RawMessage, error) {
	return r.shapePage(u.Name(), u.Exposes, m, result)
}

// shapePage is shapeList for an upstream named upstream whose filter is
// exposes.
func (r *Router) shapePage(upstream string, exposes func(list, name string) bool, m *mcp.Method, result json.RawMessage) (json.RawMessage, error) {
	return jsonrpc.FilterItems(result, m.Items, func(item json.RawMessage) (bool, error) {
		if len(item) == 0 || item[0] != '{' {
			return false, errors.New("a list item is not a JSON object")
		}
		name, _ := jsonrpc.MemberString(item, "name")
		if !exposes(m.Name, name) {
			return false, nil
		}
		if m.Name == mcp.MethodToolsList && mcp.MayMirror(item) {
			if _, err := paramHeadersOf(item); err != nil {
				r.warnOnce("invalid-tool\x00"+upstream+"\x00"+name, "upstream tool left out: invalid x-mcp-header annotation", "upstream", upstream, "tool", name, "err", err)
				return false, nil
			}
		}
		if r.joinedLen(upstream, name) > maxNameLen {
			joined := r.ns.JoinName(upstream, name)
			r.warnOnce("long-name\x00"+joined, "namespaced name longer than LLM APIs accept for function names", "name", joined, "length", len(joined), "max", maxNameLen)
		}
		return true, nil
	})
}

// joinedLen is len(r.ns.JoinName(upstream, name)), without joining them.
func (r *Router) joinedLen(upstream, name string) int {
	if !r.ns.Prefix {
		return len(name)
	}
	return len(upstream) + len(namespace.NameSeparator) + len(name)
}

// paramHeadersOf is mcp.ParamHeaders of a tool's JSON (valid: a page's).
func paramHeadersOf(tool json.RawMessage) ([]mcp.ParamHeader, error) {
	obj, err := jsonrpc.ParseValid(tool)
	if err != nil {
		return nil, err
	}
	return mcp.ParamHeaders(obj)
}

// maxNameLen is the longest function name the LLM APIs agents use accept.
const maxNameLen = 64

func (r *Router) warnOnce(key, msg string, args ...any) {
	if r.warned.first(key) {
		r.log.Warn(msg, args...)
	}
}

// marks remembers keys, boundedly, for things done once or once in a while.
type marks struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

const maxMarks = 10_000

// allow reports whether key was not marked within every, and marks it.
func (k *marks) allow(key string, every time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if at, ok := k.seen[key]; ok && now.Sub(at) < every {
		return false
	}
	if k.seen == nil || len(k.seen) >= maxMarks {
		k.seen = map[string]time.Time{}
	}
	k.seen[key] = now
	return true
}

// first reports whether key was never marked, and marks it.
func (k *marks) first(key string) bool { return k.allow(key, time.Duration(1<<63-1)) }
