package router

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
)

// The results of read-only tools, cached when the operator says so
// (upstream.ToolCache). A tool result carries no cache hints of its own,
// so the router gives the cache the operator's: a call is looked up and
// filled as a read is (both tiers, sealed when private, one upstream call
// for concurrent identical calls), keyed by the upstream, the tool and its
// canonical arguments (and, when private, the caller, as the upstream's
// private reads are), under the tag of the upstream's tool results, which
// its tools list changing invalidates (mcp.ListChange.Results) and a
// reload that replaces it too (process.revalidateReplaced).
//
// Only tools the upstream's current tools/list annotates readOnlyHint:
// true are cached, only answers complete and without isError are stored,
// and a call that is the retry of an input_required round, or that asks
// for progress, always reaches the upstream. A cached call is never held
// for a legacy upstream's questions (bridge.go): a tool that asks its
// caller something in the middle of a call is not one whose result can be
// shared, and its questions are refused.

// MetaCache is the result `_meta` member saying that an answer came from
// the cache: {"tier": "memory"|"redis"|"stale", "ageMs": N}.
const MetaCache = "io.manifold/cache"

// metaCacheKey is MetaCache as an answer's bytes spell it.
var metaCacheKey = []byte(MetaCache)

// toolCall is the cache policy of one tool call, and what the cache told
// of its answer.
type toolCall struct {
	ttl    time.Duration
	scope  string
	policy cache.Policy

	tier string
	age  time.Duration
}

// toolPolicy is the policy under which a call of u's tool (name in the
// merged view, inner its own) may be answered from the cache, or nil when
// it must reach the upstream.
func (r *Router) toolPolicy(ctx context.Context, set *upstream.Set, m *mcp.Method, u *upstream.Upstream, name, inner string, req *mcp.Request) *toolCall {
	p := u.ToolCache()
	if r.cache == nil || m.Name != mcp.MethodToolsCall || !p.Caches(inner) {
		return nil
	}
	if _, progress := req.Meta[mcp.MetaProgressToken]; progress {
		return nil // the caller wants the call's progress: only a call has it
	}
	_, responses := req.Params["inputResponses"]
	_, state := req.Params["requestState"]
	if responses || state || !r.readOnly(ctx, set, u, name, req.Header) {
		return nil
	}
	return &toolCall{ttl: p.TTL, scope: p.Scope, policy: cache.Policy{StaleIfError: p.StaleIfError}}
}

// apply makes the cache request and fill of fetch those of the policy.
func (tc *toolCall) apply(cr cache.Request, fill cache.Fill) (cache.Request, cache.Fill) {
	cr.Policy = &tc.policy
	served := cr.Served
	cr.Served = func(tier string) {
		tc.tier = tier
		if served != nil {
			served(tier)
		}
	}
	cr.Age = func(d time.Duration) { tc.age = d }
	return cr, func(ctx context.Context) (json.RawMessage, error) {
		res, err := fill(ctx)
		if err != nil {
			return nil, err
		}
		return tc.hinted(res)
	}
}

// hinted is a tool result with the cache hints it is to be stored under:
// the policy's for a complete answer without isError, none (stale at once,
// private) for any other. Whatever hints the upstream put on it are not
// the operator's, and go. Like decorate, one pass over the members into
// one buffer (FuzzToolCacheHints holds it to the decode and encode).
func (tc *toolCall) hinted(res json.RawMessage) (json.RawMessage, error) {
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(res, buf[:0])
	if err != nil {
		return nil, err
	}
	ttl, scope := int64(0), mcp.ScopePrivate
	complete, failed := false, false
	for _, m := range members {
		switch {
		case jsonrpc.KeyIs(m.Key, "resultType"):
			complete = jsonrpc.IsString(m.Value, mcp.ResultTypeComplete)
		case jsonrpc.KeyIs(m.Key, "isError"):
			failed = string(m.Value) == "true"
		}
	}
	if complete && !failed {
		ttl, scope = tc.ttl.Milliseconds(), tc.scope
	}
	out := make([]byte, 0, len(res)+48)
	out = strconv.AppendInt(append(out, `{"ttlMs":`...), ttl, 10)
	out = append(append(out, `,"cacheScope":`...), jsonrpc.Quote(scope)...)
	return appendMembersBut(out, true, members, "ttlMs", "cacheScope"), nil
}

// present is the answer the caller gets: a tool result, without the hints
// it was stored under, saying in its `_meta` when it came from the cache
// and how old it is. The cache's answer is made of what fetch checked: it
// is spliced, not checked or decoded again.
func (tc *toolCall) present(res json.RawMessage) (json.RawMessage, error) {
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(res, buf[:0])
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(res)+64)
	out = append(out, '{')
	switch tc.tier {
	case cache.TierMemory, cache.TierRedis, cache.TierStale:
		var meta []byte
		for _, m := range members {
			if jsonrpc.KeyIs(m.Key, "_meta") {
				meta = m.Value
			}
		}
		out = append(out, `"_meta":{"`+MetaCache+`":{"tier":"`...)
		out = append(out, tc.tier...)
		out = strconv.AppendInt(append(out, `","ageMs":`...), tc.age.Milliseconds(), 10)
		out = append(out, '}')
		var mbuf [8]jsonrpc.MemberRange
		if mm, err := jsonrpc.Members(meta, mbuf[:0]); err == nil {
			out = appendMembersBut(out, true, mm, MetaCache)
		} else {
			out = append(out, '}') // a `_meta` that is not an object is replaced
		}
		return appendMembersBut(out, true, members, "ttlMs", "cacheScope", "_meta"), nil
	}
	return appendMembersBut(out, false, members, "ttlMs", "cacheScope"), nil
}

// readOnlyTools is, per upstream of a configured set (in its memo), which
// of its tools its tools/list annotates readOnlyHint: true.
type readOnlyTools struct {
	mu sync.Mutex
	by map[string]readOnlySnapshot
}

type readOnlySnapshot struct {
	changes cache.Stamp // of the upstream's tool lists when it was listed
	at      time.Time
	tools   map[string]bool // merged-view names
}

type readOnlyKey struct{}

// readOnlyAge is how long a snapshot is believed without listing again
// (through the cache) when nothing said the upstream changed: for an
// upstream that does not announce its list changes.
const readOnlyAge = 10 * time.Second

// readOnly reports whether u's current tools/list annotates its tool name
// (merged view) readOnlyHint: true. What was listed is believed until the
// cache says u's tool lists changed (their invalidation, a revalidation) or
// for readOnlyAge; then the list is read again, through the cache.
func (r *Router) readOnly(ctx context.Context, set *upstream.Set, u *upstream.Upstream, name string, header http.Header) bool {
	t := set.Memo(readOnlyKey{}, func(*upstream.Set) any { return &readOnlyTools{by: map[string]readOnlySnapshot{}} }).(*readOnlyTools)
	changes := r.cache.Changes(u.Name(), mcp.TagToolLists)
	t.mu.Lock()
	s, ok := t.by[u.Name()]
	t.mu.Unlock()
	if ok && s.changes == changes && time.Since(s.at) < readOnlyAge {
		return s.tools[name]
	}
	tools, whole := r.listReadOnly(ctx, u, header)
	if whole {
		t.mu.Lock()
		t.by[u.Name()] = readOnlySnapshot{changes: changes, at: time.Now(), tools: tools}
		t.mu.Unlock()
	}
	return tools[name]
}

// listReadOnly lists u's tools (every page, through the cache, with the
// caller's headers: an upstream may want its credential) and returns those
// annotated read-only, and whether the list was read to its end.
func (r *Router) listReadOnly(ctx context.Context, u *upstream.Upstream, header http.Header) (map[string]bool, bool) {
	tools := map[string]bool{}
	whole := r.eachPage(ctx, u, toolsList, header, func(items []json.RawMessage, _ bool) {
		for _, item := range items {
			var t struct {
				Name        string `json:"name"`
				Annotations struct {
					ReadOnly bool `json:"readOnlyHint"`
				} `json:"annotations"`
			}
			if json.Unmarshal(item, &t) == nil && t.Annotations.ReadOnly {
				tools[t.Name] = true
			}
		}
	})
	return tools, whole
}
