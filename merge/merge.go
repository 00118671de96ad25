// Package merge serves one paginated list across many upstreams.
//
// A downstream page is built from at most one page of each upstream, fetched
// in parallel and concatenated in configuration order, so the merged order is
// deterministic and a page costs at most one round trip per upstream. The
// downstream cursor is a sealed Cursor carrying every upstream's own next
// cursor; it is opaque to clients, tamper-evident, and valid on any replica
// that shares the secret.
//
// An upstream that fails is left out of the page (and of the rest of the
// listing); the page then says ttlMs 0, so no client caches an incomplete
// list. Cache hints of the parts combine the way a shared cache must read
// them: the smallest ttlMs, and private if any part is private.
package merge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/mcptrace"
	"github.com/manifold-mcp/manifold/internal/panics"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Fetcher fetches one page of a list from one upstream: the upstream's result
// object, with URIs already in the merged view, valid JSON (as every answer
// is that jsonrpc.Decode took in): it is read without being checked again. req is the caller's request
// with the upstream's own cursor in its params. A *jsonrpc.Error is the
// upstream's answer; ErrNoList says the upstream has no such list; any other
// error is a failure to get one.
type Fetcher interface {
	Fetch(ctx context.Context, upstream string, req *mcp.Request) (json.RawMessage, error)
}

// FetcherFunc adapts a function to Fetcher.
type FetcherFunc func(ctx context.Context, upstream string, req *mcp.Request) (json.RawMessage, error)

// Fetch calls f.
func (f FetcherFunc) Fetch(ctx context.Context, upstream string, req *mcp.Request) (json.RawMessage, error) {
	return f(ctx, upstream, req)
}

// ErrNoList is what a Fetcher returns for an upstream that does not serve the
// list at all (it answered -32601): it contributes nothing, and its absence
// does not make the page incomplete.
var ErrNoList = errors.New("upstream does not serve this list")

// Merger merges the lists of the upstreams it is given, in their order.
type Merger struct {
	Codec *Codec
	Log   *slog.Logger
	// Unique drops an item whose identity (its uri, uriTemplate or name)
	// belongs to another upstream: one that already appeared earlier in
	// the page, or one the Routes of the listing say is another's. The
	// first upstream's in configuration order is kept. Needed when names
	// and URIs are not namespaced. The upstreams are then listed one after
	// the other: the upstreams after one with more pages to come wait for
	// its end (their page fetched with it is not used), so that an item
	// is never listed from a later upstream before the earlier one that
	// owns it has had its say, on the very first listing too.
	Unique bool

	poolOnce sync.Once
	pool     *workers
}

// Routes is what a listing learns of its upstreams and knows of them: it
// sees every upstream page that arrives, and (for Unique) names the
// upstream an identity belongs to, across pages.
type Routes interface {
	// Observe sees one upstream page's items (a JSON array); whole says
	// the page is the upstream's whole list (its first, with no next).
	Observe(upstream, method string, items json.RawMessage, whole bool)
	// Owner names the upstream whose item id is, when that is known.
	Owner(method, id string) (upstream string, known bool)
}

// UpstreamCursorError is a stale cursor refused by the upstream itself: the
// pages that led to it (and any cached copy of them) are out of date.
type UpstreamCursorError struct{ Upstream string }

func (e *UpstreamCursorError) Error() string {
	return "upstream " + e.Upstream + " no longer accepts its cursor"
}

// Is makes it an ErrStaleCursor.
func (e *UpstreamCursorError) Is(target error) bool { return target == ErrStaleCursor }

// RemovedUpstreamError is a cursor naming an upstream the configuration no
// longer has (a reload removed it).
type RemovedUpstreamError struct{ Upstream string }

func (e *RemovedUpstreamError) Error() string {
	return "the cursor names upstream " + e.Upstream + ", which is no longer configured; list again from the start"
}

// Is makes it an ErrStaleCursor.
func (e *RemovedUpstreamError) Is(target error) bool { return target == ErrStaleCursor }

// Result is a merged page and its combined cache hints. Its items are
// slices of the upstreams' pages, never decoded: chunks of the content of a
// JSON array (a whole page's elements, or single elements kept), which
// AppendItems joins.
type Result struct {
	Chunks     []json.RawMessage
	NextCursor string
	TTLms      int64
	Scope      string
}

// page is one upstream's contribution.
type page struct {
	items      json.RawMessage // the JSON array
	next       string
	ttlMs      int64
	scope      string
	resultType string
	err        error
}

// List returns the merged page for req, a list request whose params may
// carry the downstream cursor, across upstreams (in merge order), each page
// fetched with f. It fails only on a bad or stale cursor (ErrBadCursor,
// ErrStaleCursor).
func (m *Merger) List(ctx context.Context, req *mcp.Request, upstreams []string, f Fetcher, routes Routes) (*Result, error) {
	return m.ListIn(ctx, "", req, upstreams, f, routes)
}

// ListIn is List of the listing of one endpoint's view (named by its
// path): the cursors it hands out name the view, and a cursor another
// view handed out is refused (ErrBadCursor).
func (m *Merger) ListIn(ctx context.Context, view string, req *mcp.Request, upstreams []string, f Fetcher, routes Routes) (*Result, error) {
	method, ok := mcp.Lookup(req.Method)
	if !ok || method.Route != mcp.RouteAll {
		return nil, fmt.Errorf("merge: %s is not a list method", req.Method)
	}
	pending, err := m.pending(view, upstreams, req)
	if err != nil {
		return nil, err
	}
	pages := m.fetchAll(ctx, f, upstreams, pending, req, method.Items)
	return m.assemble(view, upstreams, pending, pages, method, routes)
}

// pending returns, for each upstream still to be read, the cursor to send
// it: every upstream from its start, or what the downstream cursor says.
func (m *Merger) pending(view string, upstreams []string, req *mcp.Request) (map[string]string, error) {
	var cursor string
	if _, err := req.Params.Get("cursor", &cursor); err != nil {
		return nil, ErrBadCursor
	}
	if cursor == "" {
		pending := make(map[string]string, len(upstreams))
		for _, name := range upstreams {
			pending[name] = ""
		}
		return pending, nil
	}
	c, err := m.Codec.Decode(cursor, req.Method)
	if err != nil {
		return nil, err
	}
	if c.View != view {
		return nil, ErrBadCursor
	}
	for name := range c.Pending {
		if !slices.Contains(upstreams, name) {
			return nil, &RemovedUpstreamError{Upstream: name}
		}
	}
	return c.Pending, nil
}

// fetchAll fetches one page of every pending upstream, in parallel, on
// the Merger's workers.
func (m *Merger) fetchAll(ctx context.Context, f Fetcher, upstreams []string, pending map[string]string, req *mcp.Request, listField string) []page {
	pages := make([]page, len(upstreams))
	m.poolOnce.Do(func() { m.pool = &workers{jobs: make(chan func())} })
	var wg sync.WaitGroup
	for i, name := range upstreams {
		cur, ok := pending[name]
		if !ok {
			continue
		}
		wg.Add(1)
		m.pool.run(func() {
			defer wg.Done()
			// One child span per upstream of the fan-out.
			ctx, span := mcptrace.Start(ctx, tracer, "merge.page", func() []trace.SpanStartOption {
				return []trace.SpanStartOption{trace.WithAttributes(attribute.String("manifold.upstream", name))}
			})
			defer span.End()
			defer panics.Recover(&pages[i].err) // a page is fetched on a goroutine of its own
			pages[i] = fetchPage(ctx, f, name, req, listField, cur)
			if pages[i].err != nil {
				span.SetStatus(codes.Error, pages[i].err.Error())
			}
		})
	}
	wg.Wait()
	return pages
}

var tracer = otel.Tracer("github.com/manifold-mcp/manifold/merge")

// assemble concatenates the pages in order and combines their hints and
// next cursors.
func (m *Merger) assemble(view string, upstreams []string, pending map[string]string, pages []page, method *mcp.Method, routes Routes) (*Result, error) {
	res := &Result{TTLms: -1, Scope: mcp.ScopePublic}
	next := map[string]string{}
	seen := map[string]string{}
	held := false // with Unique, an upstream before has more pages
	for i, name := range upstreams {
		cur, ok := pending[name]
		p := pages[i]
		if !ok || errors.Is(p.err, ErrNoList) {
			continue
		}
		if held {
			next[name] = cur
			continue
		}
		if p.err != nil {
			var rpcErr *jsonrpc.Error
			if cur != "" && errors.As(p.err, &rpcErr) && rpcErr.Code == jsonrpc.CodeInvalidParams {
				// The upstream no longer honours the cursor we kept for it.
				return nil, &UpstreamCursorError{Upstream: name}
			}
			m.Log.Debug("upstream left out of merged list page", "upstream", name, "method", method.Name, "err", p.err)
			res.TTLms = 0
			continue
		}
		if routes != nil {
			routes.Observe(name, method.Name, p.items, cur == "" && p.next == "")
		}
		res.Chunks = m.appendItems(res.Chunks, p.items, name, method, seen, routes)
		if p.next != "" {
			next[name] = p.next
			held = m.Unique
		}
		if res.TTLms < 0 || p.ttlMs < res.TTLms {
			res.TTLms = p.ttlMs
		}
		if p.scope != mcp.ScopePublic {
			res.Scope = mcp.ScopePrivate
		}
	}
	res.TTLms = max(res.TTLms, 0)
	if len(next) > 0 {
		s, err := m.Codec.Encode(Cursor{Method: method.Name, View: view, Pending: next})
		if err != nil {
			return nil, err
		}
		res.NextCursor = s
	}
	return res, nil
}

// appendItems adds one upstream's items: the page's whole array content at
// once, or (with Unique) each item whose identity is not another
// upstream's. Routes hear of a collision: they see every page whole.
func (m *Merger) appendItems(chunks []json.RawMessage, items json.RawMessage, upstream string, method *mcp.Method, seen map[string]string, routes Routes) []json.RawMessage {
	if !m.Unique {
		// items is nil or a trimmed array (parsePage).
		if len(items) > 2 {
			if content := bytes.TrimSpace(items[1 : len(items)-1]); len(content) > 0 {
				chunks = append(chunks, content)
			}
		}
		return chunks
	}
	_ = jsonrpc.EachElement(items, func(item json.RawMessage) error {
		id, _ := jsonrpc.MemberString(item, method.ID)
		if _, dup := seen[id]; dup {
			return nil
		}
		if routes != nil {
			if owner, known := routes.Owner(method.Name, id); known && owner != upstream {
				return nil
			}
		}
		seen[id] = upstream
		chunks = append(chunks, item)
		return nil
	})
	return chunks
}

// AppendItems appends the merged items to b, as a JSON array.
func (r *Result) AppendItems(b []byte) []byte {
	b = append(b, '[')
	for i, c := range r.Chunks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, c...)
	}
	return append(b, ']')
}

// ItemsLen is the length of what AppendItems appends.
func (r *Result) ItemsLen() int {
	n := 2
	for _, c := range r.Chunks {
		n += len(c) + 1
	}
	return n
}

func fetchPage(ctx context.Context, f Fetcher, upstream string, req *mcp.Request, listField, cursor string) page {
	method := req.Method
	sub := *req
	sub.Params = req.Params.Clone()
	delete(sub.Params, "cursor")
	if cursor != "" {
		_ = sub.Params.Set("cursor", cursor)
	}
	raw, err := f.Fetch(ctx, upstream, &sub)
	if err != nil {
		return page{err: err}
	}
	p, err := parsePage(raw, listField)
	if err != nil {
		return page{err: fmt.Errorf("malformed %s result: %w", method, err)}
	}
	if p.resultType != "" && p.resultType != mcp.ResultTypeComplete {
		return page{err: fmt.Errorf("%s result has resultType %q", method, p.resultType)}
	}
	return p
}

// parsePage reads what a merge needs of one upstream's page, in one pass
// over its members and without decoding its items: their array (a slice of
// raw), its next cursor and cache hints. raw must be valid JSON, as every
// answer is once jsonrpc.Decode took it in (the Fetcher's contract); only
// its shape is checked here, as encoding/json would check it.
func parsePage(raw json.RawMessage, listField string) (page, error) {
	var p page
	var buf [8]jsonrpc.MemberRange
	members, err := jsonrpc.Members(raw, buf[:0])
	if err != nil {
		return p, err
	}
	var ttl float64
	public := false // a missing or unknown cacheScope is private (mcp.NormalizeScope)
	for _, mr := range members {
		switch {
		case jsonrpc.KeyIs(mr.Key, listField):
			// A missing or null list has no items.
			if string(mr.Value) != "null" {
				if len(mr.Value) == 0 || mr.Value[0] != '[' {
					return p, fmt.Errorf("%q: not an array", listField)
				}
				p.items = mr.Value
			}
		case jsonrpc.KeyIs(mr.Key, "ttlMs"):
			if ttl, err = number(mr.Value); err != nil {
				return p, fmt.Errorf("%q: %w", "ttlMs", err)
			}
		case jsonrpc.KeyIs(mr.Key, "nextCursor"):
			if p.next, err = optionalString(mr.Value); err != nil {
				return p, fmt.Errorf("%q: %w", "nextCursor", err)
			}
		case jsonrpc.KeyIs(mr.Key, "resultType"):
			p.resultType = resultType(mr.Value)
		case jsonrpc.KeyIs(mr.Key, "cacheScope"):
			public = jsonrpc.IsString(mr.Value, mcp.ScopePublic)
		}
	}
	if len(p.next) > MaxUpstreamCursor {
		return p, fmt.Errorf("nextCursor of %d bytes is longer than %d", len(p.next), MaxUpstreamCursor)
	}
	p.ttlMs, p.scope = mcp.NormalizeTTL(ttl), mcp.ScopePrivate
	if public {
		p.scope = mcp.ScopePublic
	}
	return p, nil
}

// number reads a JSON number (null: 0) as encoding/json reads one into a
// float64: one out of its range is an error.
func number(v []byte) (float64, error) {
	if string(v) == "null" {
		return 0, nil
	}
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return 0, fmt.Errorf("%s is not a number", v)
	}
	return strconv.ParseFloat(string(v), 64)
}

// resultType reads a resultType: "" if it is not a string, and the common
// one without a copy.
func resultType(v []byte) string {
	if jsonrpc.IsString(v, mcp.ResultTypeComplete) {
		return mcp.ResultTypeComplete
	}
	s, _ := jsonrpc.StringValue(v)
	return s
}

// optionalString reads a JSON string or null ("").
func optionalString(v []byte) (string, error) {
	if string(v) == "null" {
		return "", nil
	}
	s, ok := jsonrpc.StringValue(v)
	if !ok {
		return "", fmt.Errorf("%.40s is not a string", v)
	}
	return s, nil
}
