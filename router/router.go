// Package router decides, for each downstream request, which upstreams serve
// it and how their answers become Manifold's answer.
//
// Lists go to every upstream through package merge; a read goes to the one
// upstream its URI names (prefix mode) or that lists it (none mode). Every
// upstream answer passes through one function, fetch, which namespaces the
// URIs in it and turns the upstream's error codes into ones that are legal
// in 2026-07-28, so what a cache stores and what a client sees are already in
// the merged view. Manifold's own answers (server/discover) are built here too.
package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/clip"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/merge"
	"github.com/manifold-mcp/manifold/upstream"
)

// Handler answers one validated request. A *jsonrpc.Error is an answer for
// the caller; any other error is a bug and is reported as an internal error.
// Every frontend calls one; cross-cutting concerns wrap one.
type Handler interface {
	Handle(ctx context.Context, req *mcp.Request) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *mcp.Request) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
	return f(ctx, req)
}

// Options configure a Router.
type Options struct {
	Upstreams *upstream.Registry
	Namespace namespace.Namespace
	Codec     *merge.Codec
	// Secret seals the requestState of held calls (bridge.go).
	Secret []byte
	// CredentialHeaders make up a caller's credential: a held call is
	// resumed only by a caller with the same ones (and principal).
	CredentialHeaders []string
	Logger            *slog.Logger
	// Cache answers what it can; nil means every call reaches its upstream.
	Cache *cache.Cache
	// Admit, if set, is asked before anything is served from an upstream,
	// cache hits included; its error (a rate limit) is the answer.
	Admit func(ctx context.Context, upstream string) error
}

// Router routes requests. It is safe for concurrent use.
type Router struct {
	ups    *upstream.Registry
	ns     namespace.Namespace
	merger *merge.Merger
	cache  *cache.Cache
	log    *slog.Logger
	meta   json.RawMessage // the result `_meta` naming Manifold
	// serverInfo is meta's one member, as it is spliced into a result's
	// `_meta` (decorate.go).
	serverInfo []byte

	warned marks // warnings logged once
	holds  *holds
	admit  func(ctx context.Context, upstream string) error
	// indexes are the search endpoints' (catalog.go).
	indexes *indexes
}

// DiscoverTTL is how long clients may cache Manifold's server/discover: its
// capabilities follow the upstreams', which change rarely.
const DiscoverTTL = 30_000

// New builds a Router.
func New(o Options) *Router {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := &Router{ups: o.Upstreams, ns: o.Namespace, cache: o.Cache, log: o.Logger,
		holds: newHolds(o.Secret, o.CredentialHeaders), admit: o.Admit, indexes: newIndexes()}
	r.merger = &merge.Merger{
		Codec:  o.Codec,
		Log:    o.Logger,
		Unique: !o.Namespace.Prefix,
	}
	r.meta, _ = json.Marshal(map[string]any{mcp.MetaServerInfo: mcp.ServerInfo})
	r.serverInfo = r.meta[1 : len(r.meta)-1]
	return r
}

// Handle answers one request, routed as the method table says (looked up
// once: the row goes with the request to the upstream). The set of
// upstreams is taken once: a request finishes on the set it started with.
func (r *Router) Handle(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
	n := noteOf(ctx)
	if res, err, ok := r.replay(ctx, req, n); ok {
		return res, err
	}
	m, ok := mcp.Lookup(req.Method)
	if !ok {
		if slices.Contains(mcp.Removed, req.Method) {
			return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method %q was removed in protocol version %s", req.Method, mcp.Version)
		}
		return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method %q is not supported", req.Method)
	}
	var err error
	switch {
	case consenting(req):
		req, err = r.holds.resumeConsent(ctx, req)
	case passing(req):
		req, err = r.holds.openPassed(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	res, err := r.route(ctx, callersSet(ctx, r.ups), m, req, n)
	if cr, ok := oauth.IsConsent(err); ok {
		return r.holds.askConsent(ctx, req, cr)
	}
	if err != nil {
		return nil, err
	}
	return r.holds.sealPassed(ctx, m, req, res), nil
}

// route serves req from set as its method's row says; n is the request's
// note (Noted), nil if none.
func (r *Router) route(ctx context.Context, set *upstream.Set, m *mcp.Method, req *mcp.Request, n *Note) (json.RawMessage, error) {
	if set.View().Searches() && (m.Name == mcp.MethodToolsList || m.Name == mcp.MethodToolsCall) {
		if res, err, ok := r.searchedTools(ctx, set, m, req, n); ok {
			return res, err
		}
	}
	switch m.Route {
	case mcp.RouteLocal:
		return r.discover(ctx, set)
	case mcp.RouteAll:
		return r.list(ctx, set, m, req, n)
	case mcp.RouteURI:
		return r.read(ctx, set, m, req, n)
	case mcp.RouteName:
		return r.byName(ctx, set, m, req, n)
	case mcp.RouteRef:
		return r.complete(ctx, set, m, req, n)
	}
	// A stream is a frontend's to serve, with the hub.
	return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method %q is not served as a single answer", req.Method)
}

// discover is Manifold's own server/discover: what it serves, never what
// it cannot honour. Right after a start it waits (boundedly) for the
// upstreams' first probe; an answer that lacks an upstream whose
// capabilities are not known (still probing, or down) is not to be
// cached: it will say more once that upstream answers.
func (r *Router) discover(ctx context.Context, set *upstream.Set) (json.RawMessage, error) {
	caps, whole := r.awaitCapabilities(ctx, set)
	ttl := DiscoverTTL
	if !whole {
		ttl = 0
	}
	return json.Marshal(map[string]any{
		"resultType":        mcp.ResultTypeComplete,
		"supportedVersions": []string{mcp.Version},
		"capabilities":      caps,
		"ttlMs":             ttl,
		"cacheScope":        mcp.ScopePublic,
		"_meta":             json.RawMessage(r.meta),
	})
}

func (r *Router) list(ctx context.Context, set *upstream.Set, m *mcp.Method, req *mcp.Request, n *Note) (json.RawMessage, error) {
	routes := r.routesOf(set)
	if !r.ns.Prefix && req.Params["cursor"] == nil && (m.ID == "name") {
		// Without namespaces a name is the first upstream's that lists it,
		// which the pages of one merged page cannot tell: another's may be
		// on a later page. Listing each upstream whole once per set tells.
		r.learnWhole(ctx, set, m.Name)
	}
	res, err := r.merger.ListIn(ctx, cursorView(set), req, set.Names(), r.pages(set, m, n), viewRoutes{routes, set.Names(), set.View()})
	var refused *merge.UpstreamCursorError
	if errors.As(err, &refused) && r.cache != nil {
		// The cached pages that handed out this cursor are stale too: drop
		// them, so that listing again from the start can succeed.
		r.cache.Invalidate(ctx, refused.Upstream, m.Tag)
	}
	switch {
	case errors.Is(err, merge.ErrStaleCursor):
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "stale cursor: %v", err)
	case errors.Is(err, merge.ErrBadCursor):
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid cursor")
	case errors.Is(err, merge.ErrCursorTooLong):
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "%v", err)
	case err != nil:
		return nil, err
	}
	return r.listResult(m, res), nil
}

// listResult writes a merged page in one buffer: its items are slices of
// the upstream pages, copied once.
func (r *Router) listResult(m *mcp.Method, res *merge.Result) json.RawMessage {
	b := make([]byte, 0, 256+len(r.meta)+len(res.NextCursor)+res.ItemsLen())
	b = append(b, `{"_meta":`...)
	b = append(b, r.meta...)
	b = append(b, `,"resultType":"complete","cacheScope":`...)
	b = append(b, jsonrpc.Quote(res.Scope)...)
	b = append(b, `,"ttlMs":`...)
	b = strconv.AppendInt(b, res.TTLms, 10)
	if res.NextCursor != "" {
		b = append(b, `,"nextCursor":`...)
		b = append(b, jsonrpc.Quote(res.NextCursor)...)
	}
	b = append(b, ',')
	b = append(b, jsonrpc.Quote(m.Items)...)
	b = append(b, ':')
	b = res.AppendItems(b)
	return append(b, '}')
}

// pages is the merge.Fetcher of a set's lists of m: one upstream's page,
// in the merged view, noted in n.
func (r *Router) pages(set *upstream.Set, m *mcp.Method, n *Note) merge.Fetcher {
	return merge.FetcherFunc(func(ctx context.Context, name string, req *mcp.Request) (json.RawMessage, error) {
		res, err := r.fetch(ctx, hop{u: set.Get(name), m: m, req: req, note: n})
		if _, consent := oauth.IsConsent(err); consent && req.Method == mcp.MethodToolsList && req.Params["cursor"] == nil {
			return connectPage(set.Get(name)) // the caller's own to call; past the view's filter, as Manifold's
		}
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound {
			return nil, merge.ErrNoList
		}
		if err != nil {
			return nil, err
		}
		return viewPage(set, req.Method, res)
	})
}

// how is what the router decided of req's call: its answer is its legacy
// caller's alone, and may be asked in the caller's own revision
// (upstream/era.go), unless a cache keeps it: under a tool cache
// (toolCached), or, for a method the table caches, the cache tier (of
// which there is none: noTier). A list page is always kept: the merge
// reads its hints, which only 2026-07-28 carries.
func how(m *mcp.Method, req *mcp.Request, toolCached, noTier bool) upstream.How {
	if req.CallerVersion == "" || toolCached {
		return upstream.How{}
	}
	return upstream.How{Alone: !m.Cacheable || noTier && m.Route != mcp.RouteAll}
}

// A hop is one request on its way to one upstream, with all that decides
// how fetch takes it there. It is passed by value: the fill that may call
// it keeps its own copy, in one allocation.
type hop struct {
	u   *upstream.Upstream
	m   *mcp.Method // req's row of the method table
	req *mcp.Request
	uri string // the merged-view URI of a read, for not-found errors
	// note is the request's (Noted), nil for Manifold's own work (a
	// listing to learn names), which it must not record.
	note *Note
	// tool is the cache policy of a tool call (toolcache.go), nil if none.
	tool *toolCall
	// plan, when set, receives the cache's lookup for the next read of the
	// request's shape (replay.go).
	plan *plan
	// how is fetch's decision of the call (how), made once per hop.
	how upstream.How
}

// fetch is the one way to an upstream, through the cache. It returns the
// result in the merged view, or the upstream's error made legal for
// 2026-07-28 (a *jsonrpc.Error), or a failure to get an answer.
func (r *Router) fetch(ctx context.Context, h hop) (json.RawMessage, error) {
	if r.admit != nil {
		if err := r.admit(ctx, h.u.Name()); err != nil {
			return nil, err
		}
	}
	if h.note != nil {
		h.note.setUpstream(h.u.Name())
	}
	h.how = how(h.m, h.req, h.tool != nil, !r.cache.Keeps())
	if r.cache == nil {
		if h.note != nil {
			h.note.setTier(cache.TierUpstream)
		}
		return r.call(ctx, h)
	}
	tag := h.m.Tag
	if tag == mcp.TagURI {
		// Every spelling of one URI is one entry, under one tag, and the
		// upstream is asked in the spelling that keys it.
		asked := h.req.Params.String("uri")
		normal := mcp.NormalizeURI(asked)
		tag = mcp.TagOfNormal(normal)
		if normal != asked {
			h.req = withURI(h.req, normal)
		}
	}
	fill := func(ctx context.Context) (json.RawMessage, error) { return r.call(ctx, h) }
	cr := cache.Request{Upstream: h.u.Name(), EraChanges: h.u.EraChanges(), Tag: tag, Req: h.req, Method: h.m,
		Forwarded: h.u.ForwardHeaders(), Principal: principalKey(ctx, h.u)}
	if h.note != nil {
		cr.Served = h.note.setTier
	}
	if h.tool != nil {
		cr, fill = h.tool.apply(cr, fill)
	} else if h.plan != nil {
		cr.Prepare = h.plan.prepared
	}
	return r.cache.Get(ctx, cr, fill)
}

// withURI is req with params.uri set to uri.
func withURI(req *mcp.Request, uri string) *mcp.Request {
	sub := *req
	sub.Params = req.Params.Clone()
	sub.Params["uri"] = jsonrpc.Quote(uri)
	return &sub
}

// callersSet is the current set of upstreams as the caller may see it:
// those of the endpoint's view that its access rules admit.
func callersSet(ctx context.Context, reg *upstream.Registry) *upstream.Set {
	return reg.Load().In(upstream.ViewOf(ctx)).For(auth.ClaimsFrom(ctx))
}

// principalKey is what keys the caller's private entries of u instead of
// its credential: its principal, when that names the caller across token
// refreshes (a JWT's) and u answers per principal, not per token.
func principalKey(ctx context.Context, u *upstream.Upstream) string {
	if p := auth.From(ctx); p != nil && p.Keyed && u.KeyByPrincipal() {
		return p.ID
	}
	return ""
}

// call asks the upstream and puts its answer in the shape the cache stores
// and callers see: lists filtered, results decorated with what every result
// must carry, names and URIs namespaced, errors legal.
func (r *Router) call(ctx context.Context, h hop) (json.RawMessage, error) {
	u, req := h.u, h.req
	resp, err := u.Call(ctx, req, h.how)
	if _, consent := oauth.IsConsent(err); consent {
		return nil, err // the caller's to be asked (Handle)
	}
	if errors.Is(err, oauth.ErrScopeRetries) {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "upstream %s asked for more scope again after %s consents; Manifold stopped asking", u.Name(), "repeated").
			WithData(map[string]string{"upstream": u.Name()})
	}
	if err != nil {
		return nil, &unavailableError{upstream: u.Name(), err: err}
	}
	if resp.Error != nil {
		if !validCode(resp.Error.Code) && r.warned.allow("invalid error:"+u.Name(), invalidErrorEvery) {
			r.log.Warn("upstream answered an invalid error", "upstream", u.Name(), "method", req.Method,
				"code", resp.Error.Code, "message", clip.Text(resp.Error.Message, maxLoggedMessage))
		}
		return nil, legalize(u.Name(), req.Method, h.uri, resp.Error)
	}
	res, err := r.shape(u, h.m, req, h.how, resp.Result)
	if err != nil {
		return nil, &unavailableError{upstream: u.Name(), err: &malformedError{err}}
	}
	return res, nil
}

// malformedError is an upstream's result that is not one Manifold may pass
// on. Its text is Manifold's own account of what is wrong, never the
// upstream's bytes, so the caller is told it.
type malformedError struct{ err error }

func (e *malformedError) Error() string { return "malformed result: " + e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// unavailableError is a failure to get any answer from an upstream. Its
// message, which may carry addresses and an error page's body, stays in
// the log (the upstream's health record logs it, as a summary); the
// caller is told which upstream failed, and its HTTP status if it gave one.
type unavailableError struct {
	upstream string
	err      error
}

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Is lets the cache tell an upstream it could not reach (which a stale
// entry may stand in for) from one that refused the request.
func (e *unavailableError) Is(target error) bool {
	return target == cache.ErrUnreachable && upstream.Unreachable(e.err)
}

func (e *unavailableError) rpc() *jsonrpc.Error {
	msg := "upstream %s unavailable"
	var se *upstream.StatusError
	var me *malformedError
	var refused *oauth.RefusedError
	var down *oauth.ServiceDownError
	switch {
	case errors.As(e.err, &refused):
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "%s", refused.Error()).WithData(map[string]string{"upstream": e.upstream})
	case errors.As(e.err, &down):
		// Not the caller's fault: come back (HTTP 503 with Retry-After).
		rpc := jsonrpc.Errorf(jsonrpc.CodeInternalError, "upstream %s: the %s is unavailable: retry later", e.upstream, down.Service).
			WithData(map[string]any{"upstream": e.upstream, "retryAfterMs": oauth.ServiceRetryAfter.Milliseconds()})
		rpc.Unavailable = true
		return rpc
	case errors.As(e.err, &me):
		msg = "upstream %s answered a " + strings.ReplaceAll(me.Error(), "%", "%%")
	case errors.Is(e.err, context.DeadlineExceeded):
		msg = "upstream %s timed out"
	case errors.As(e.err, &se) && se.Status < 500:
		msg = fmt.Sprintf("upstream %%s refused the request (HTTP %d)", se.Status)
	case errors.As(e.err, &se):
		msg = fmt.Sprintf("upstream %%s unavailable (HTTP %d)", se.Status)
	}
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, msg, e.upstream).WithData(map[string]string{"upstream": e.upstream})
}

// validURI checks a URI a caller asked for: bounded, absolute (an RFC 3986
// scheme and a colon), and free of spaces and control characters. What the
// rest means is for the upstream that owns the scheme to judge.
func validURI(uri string) bool {
	if uri == "" || len(uri) > maxURILen {
		return false
	}
	colon := strings.IndexByte(uri, ':')
	if colon < 1 || !isAlpha(uri[0]) {
		return false
	}
	for i := 1; i < colon; i++ {
		if c := uri[i]; !isAlpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	for i := colon; i < len(uri); i++ {
		if c := uri[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

const maxURILen = 8 << 10

// shape makes an upstream's result what Manifold may send, in the merged
// view: a page of tools or prompts filtered, any other answer that is not
// a list page decorated; names and URIs namespaced, in the decorating pass
// where the namespace rewrites listed items (decorate), else after.
func (r *Router) shape(u *upstream.Upstream, m *mcp.Method, req *mcp.Request, h upstream.How, res json.RawMessage) (json.RawMessage, error) {
	if m.Name == mcp.MethodResourcesRead {
		if err := checkRead(res); err != nil {
			return nil, err
		}
	}
	var err error
	switch {
	case m.Route == mcp.RouteAll && m.ID == "name":
		res, err = r.shapeList(u, m, res)
	case m.Route == mcp.RouteAll:
	case h.Alone && !bytes.Contains(res, metaCacheKey):
		// A legacy caller's answer, which no cache shares: what decorate
		// adds, its frontend would take away (legacyResult). One that
		// names Manifold's cache marker is decorated, which drops it.
		var ok bool
		if res, ok = jsonrpc.AsObject(res); !ok {
			err = errNotObject
		}
	default:
		if it, fused := r.ns.Items(u.Name(), m); fused {
			if res, err = r.decorate(res, m.Cacheable, it); err != nil {
				return nil, namespace.ItemsError(m, err)
			}
			return res, nil
		}
		res, err = r.decorate(res, m.Cacheable, namespace.ItemsRewrite{})
	}
	if err != nil {
		return nil, err
	}
	return r.ns.Result(u.Name(), req.Method, res)
}

// errNotObject is an upstream's result that is not a JSON object, which
// no MCP result may be.
var errNotObject = errors.New("the result is not a JSON object")

// negotiationWait bounds how long Capabilities waits for upstreams still
// negotiating.
const negotiationWait = 3 * time.Second

// Capabilities is what Manifold serves, from the current upstreams, after
// waiting (boundedly) for those still negotiating: a legacy caller decides
// once, at initialize, what it will ever ask.
func (r *Router) Capabilities(ctx context.Context) mcp.Capabilities {
	caps, _ := r.awaitCapabilities(ctx, callersSet(ctx, r.ups))
	return caps
}

// awaitCapabilities is capabilities(set) once the upstreams not negotiated
// with yet have been (for at most negotiationWait; one already found down
// is not waited for, and one reached per principal may be up, its
// challenge answered, and not negotiated with), and whether every
// upstream's are known.
func (r *Router) awaitCapabilities(ctx context.Context, set *upstream.Set) (mcp.Capabilities, bool) {
	ctx, cancel := context.WithTimeout(ctx, negotiationWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, u := range set.All() {
		if _, ok := u.Capabilities(); !ok && u.State() != upstream.Down {
			wg.Go(func() { _, _ = u.Info(ctx) })
		}
	}
	wg.Wait()
	whole := true
	for _, u := range set.All() {
		_, ok := u.Capabilities()
		whole = whole && ok
	}
	return capabilities(set), whole
}

// capabilities is what Manifold serves now, for server/discover: resources
// always; tools, prompts and completions when some upstream serves them;
// resource subscriptions when some upstream offers them. Each list's
// changes are reported (the hub honours exactly these): an upstream's own,
// when it reports them, and a reload's, always. Upstreams still
// negotiating are not waited for.
func capabilities(set *upstream.Set) mcp.Capabilities {
	caps := mcp.Capabilities{Resources: &mcp.ResourcesCapability{ListChanged: true}}
	orList := func(dst **mcp.ListCapability, src *mcp.ListCapability) {
		if src != nil && *dst == nil {
			*dst = &mcp.ListCapability{ListChanged: true}
		}
	}
	for _, u := range set.All() {
		if u.AsksConsent() {
			orList(&caps.Tools, &mcp.ListCapability{}) // its connect tool, at least
		}
		c, ok := u.Capabilities()
		if !ok {
			continue
		}
		if c.Resources != nil {
			caps.Resources.Subscribe = caps.Resources.Subscribe || c.Resources.Subscribe
		}
		orList(&caps.Tools, c.Tools)
		orList(&caps.Prompts, c.Prompts)
		if c.Completions != nil {
			caps.Completions = &struct{}{}
		}
	}
	return caps
}
