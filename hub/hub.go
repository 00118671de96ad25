// Package hub serves subscriptions/listen: it fans each downstream
// subscription out to the upstreams and fans their notifications back in.
//
// Every downstream stream registers what it watches (the merged list, and
// namespaced resource URIs). The hub keeps a reference count per upstream and
// URI and hands each upstream the set it must watch, so any number of
// downstream watchers of one URI cost that upstream one subscription, and the
// last one leaving releases it. Notifications come back from the upstreams as
// events: the hub first invalidates the cache (so a watcher that re-reads gets
// the new answer), then delivers a notification tagged with each watcher's own
// subscription id, with URIs namespaced. A watch that was down and came back
// counts as a change to everything watched on that upstream.
//
// Each stream has a bounded queue; a watcher too slow to drain it is
// disconnected rather than allowed to hold memory, and can subscribe again.
package hub

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/jsonrpc"
	"github.com/manifold-mcp/manifold/mcp"
	"github.com/manifold-mcp/manifold/namespace"
	"github.com/manifold-mcp/manifold/sse"
	"github.com/manifold-mcp/manifold/upstream"
)

// Options configure a Hub.
type Options struct {
	// Upstreams in configuration order.
	Upstreams []*upstream.Upstream
	Namespace namespace.Namespace
	// Cache is invalidated by upstream notifications; may be nil.
	Cache  *cache.Cache
	Logger *slog.Logger
	// KeepAlive is the interval of SSE comments on quiet streams.
	KeepAlive time.Duration
	// MaxStreams bounds the open downstream streams.
	MaxStreams int
	// Queue is how many notifications may wait for one slow watcher.
	Queue int
}

// Hub is safe for concurrent use.
type Hub struct {
	o      Options
	byName map[string]*upstream.Upstream

	mu       sync.Mutex
	watchers map[*watcher]struct{}
	byURI    map[string]map[string]map[*watcher]struct{} // upstream → its URI → watchers
	closing  chan struct{}
	closed   bool
	streams  sync.WaitGroup
	open     atomic.Int64
}

// watcher is one downstream subscription.
type watcher struct {
	id    json.RawMessage
	lists bool
	uris  map[string][]string // upstream → its own URIs watched
	out   chan []byte
	slow  chan struct{} // closed when the queue overflowed
	once  sync.Once
}

// New returns a Hub. Call Start once the upstreams exist.
func New(o Options) *Hub {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 25 * time.Second
	}
	if o.Queue <= 0 {
		o.Queue = 64
	}
	h := &Hub{o: o, byName: map[string]*upstream.Upstream{}, watchers: map[*watcher]struct{}{},
		byURI: map[string]map[string]map[*watcher]struct{}{}, closing: make(chan struct{})}
	for _, u := range o.Upstreams {
		h.byName[u.Name()] = u
	}
	return h
}

// OnEvent receives an upstream's announcements (upstream.Options.OnEvent).
func (h *Hub) OnEvent(name string, ev upstream.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The cache first: whoever is told of a change and reads again must
	// not be served what changed.
	if c := h.o.Cache; c != nil {
		switch ev.Kind {
		case upstream.ResourcesChanged:
			c.Invalidate(ctx, name, cache.TagResourceLists)
		case upstream.ToolsChanged:
			c.Invalidate(ctx, name, cache.TagToolLists)
		case upstream.PromptsChanged:
			c.Invalidate(ctx, name, cache.TagPromptLists)
		case upstream.ResourceUpdated:
			c.Invalidate(ctx, name, ev.URI)
		case upstream.Missed:
			c.InvalidateUpstream(ctx, name)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case upstream.ResourcesChanged:
		for w := range h.watchers {
			if w.lists {
				h.send(w, listChanged(w.id))
			}
		}
	case upstream.ResourceUpdated:
		uri := h.o.Namespace.Join(name, ev.URI)
		for w := range h.byURI[name][ev.URI] {
			h.send(w, updated(w.id, uri))
		}
	case upstream.Missed:
		for w := range h.watchers {
			if w.lists {
				h.send(w, listChanged(w.id))
			}
			for _, inner := range w.uris[name] {
				h.send(w, updated(w.id, h.o.Namespace.Join(name, inner)))
			}
		}
	}
}

// send queues msg for w without ever blocking the fan-out; h.mu is held.
func (h *Hub) send(w *watcher, msg []byte) {
	select {
	case w.out <- msg:
	default:
		w.once.Do(func() { close(w.slow) })
	}
}

// Stream serves one subscriptions/listen request (endpoint.Streamer). It
// returns an error only before writing anything; the endpoint answers it.
func (h *Hub) Stream(w http.ResponseWriter, r *http.Request, req *mcp.Request, id json.RawMessage) error {
	var filter mcp.SubscriptionFilter
	raw, ok := req.Params["notifications"]
	if !ok || len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &filter) != nil {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.notifications must be a subscription filter object")
	}
	if h.o.MaxStreams > 0 && int(h.open.Load()) >= h.o.MaxStreams {
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "too many open subscription streams")
	}
	wt, honoured, pending, err := h.register(r.Context(), id, filter)
	if err != nil {
		return err
	}
	defer h.unregister(wt)
	// The acknowledgment waits (briefly) for the upstream subscriptions it
	// promises, so an update that happens after it is delivered. An
	// upstream that is down does not hold it up: when its watch comes back,
	// the watcher is told that anything may have changed.
	wctx, cancel := context.WithTimeout(r.Context(), ackWait)
	for u, v := range pending {
		u.WaitWatched(wctx, v)
	}
	cancel()

	out := sse.NewWriter(w)
	w.WriteHeader(http.StatusOK)
	if err := out.Event(acknowledged(id, honoured)); err != nil {
		return nil
	}
	keepAlive := time.NewTicker(h.o.KeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case msg := <-wt.out:
			if out.Event(msg) != nil {
				return nil
			}
		case <-keepAlive.C:
			if out.Comment("keep-alive") != nil {
				return nil
			}
		case <-wt.slow:
			h.o.Logger.Warn("subscriber too slow; closing its stream", "subscriptionId", string(id))
			return nil
		case <-r.Context().Done():
			return nil
		case <-h.closing:
			_ = out.Event(closure(id))
			return nil
		}
	}
}

// ackWait bounds how long an acknowledgment waits for upstream subscriptions.
const ackWait = 3 * time.Second

// register records a watcher and what of its filter Manifold can honour, and
// returns the watch versions of the upstreams whose subscriptions changed.
func (h *Hub) register(ctx context.Context, id json.RawMessage, f mcp.SubscriptionFilter) (*watcher, mcp.SubscriptionFilter, map[*upstream.Upstream]uint64, error) {
	wt := &watcher{id: id, uris: map[string][]string{}, out: make(chan []byte, h.o.Queue), slow: make(chan struct{})}
	caps := h.capabilities(ctx)
	var honoured mcp.SubscriptionFilter
	if f.ResourcesListChanged && anyOf(caps, func(c mcp.Capabilities) bool { return c.Resources != nil && c.Resources.ListChanged }) {
		honoured.ResourcesListChanged = true
		wt.lists = true
	}
	// Manifold serves no tools or prompts: those filters are never honoured.
	for _, uri := range f.ResourceSubscriptions {
		targets := h.targets(uri, caps)
		for name, inner := range targets {
			wt.uris[name] = append(wt.uris[name], inner)
		}
		if len(targets) > 0 {
			honoured.ResourceSubscriptions = append(honoured.ResourceSubscriptions, uri)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, honoured, nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "shutting down")
	}
	pending := map[*upstream.Upstream]uint64{}
	h.watchers[wt] = struct{}{}
	h.streams.Add(1)
	h.open.Add(1)
	for name, uris := range wt.uris {
		for _, inner := range uris {
			if h.byURI[name] == nil {
				h.byURI[name] = map[string]map[*watcher]struct{}{}
			}
			if h.byURI[name][inner] == nil {
				h.byURI[name][inner] = map[*watcher]struct{}{}
			}
			h.byURI[name][inner][wt] = struct{}{}
		}
		pending[h.byName[name]] = h.resync(name)
	}
	return wt, honoured, pending, nil
}

func (h *Hub) unregister(wt *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers, wt)
	for name, uris := range wt.uris {
		for _, inner := range uris {
			delete(h.byURI[name][inner], wt)
			if len(h.byURI[name][inner]) == 0 {
				delete(h.byURI[name], inner)
			}
		}
		h.resync(name)
	}
	h.open.Add(-1)
	h.streams.Done()
}

// resync hands an upstream the URIs it must watch: those with at least one
// watcher. It returns the version of that set. h.mu is held.
func (h *Hub) resync(name string) uint64 {
	uris := make([]string, 0, len(h.byURI[name]))
	for inner := range h.byURI[name] {
		uris = append(uris, inner)
	}
	return h.byName[name].Watch(uris)
}

// capabilities returns what each upstream declared, waiting (boundedly) for
// upstreams still negotiating: a subscription that arrives just after
// startup must not be refused for want of an answer yet to come.
func (h *Hub) capabilities(ctx context.Context) map[string]mcp.Capabilities {
	ctx, cancel := context.WithTimeout(ctx, ackWait)
	defer cancel()
	out := make(map[string]mcp.Capabilities, len(h.o.Upstreams))
	for _, u := range h.o.Upstreams {
		c, ok := u.Capabilities()
		if !ok {
			info, err := u.Info(ctx)
			if err != nil {
				continue
			}
			c = info.Capabilities
		}
		out[u.Name()] = c
	}
	return out
}

func anyOf(caps map[string]mcp.Capabilities, f func(mcp.Capabilities) bool) bool {
	for _, c := range caps {
		if f(c) {
			return true
		}
	}
	return false
}

// targets maps a namespaced URI to the upstreams that can tell of its
// changes, with the upstream's own URI. Without namespaces every upstream
// that can subscribe watches it.
func (h *Hub) targets(uri string, caps map[string]mcp.Capabilities) map[string]string {
	canSubscribe := func(name string) bool {
		c, ok := caps[name]
		return ok && c.Resources != nil && c.Resources.Subscribe
	}
	out := map[string]string{}
	if h.o.Namespace.Prefix {
		name, inner, ok := h.o.Namespace.Split(uri)
		if ok && canSubscribe(name) {
			out[name] = inner
		}
		return out
	}
	for _, u := range h.o.Upstreams {
		if canSubscribe(u.Name()) {
			out[u.Name()] = uri
		}
	}
	return out
}

// Capabilities is what Manifold can honour of subscriptions right now, for
// server/discover: list changes if any upstream reports them, updates if any
// upstream can subscribe. It does not wait for upstreams still negotiating.
func (h *Hub) Capabilities() mcp.ResourcesCapability {
	caps := map[string]mcp.Capabilities{}
	for _, u := range h.o.Upstreams {
		if c, ok := u.Capabilities(); ok {
			caps[u.Name()] = c
		}
	}
	return mcp.ResourcesCapability{
		ListChanged: anyOf(caps, func(c mcp.Capabilities) bool { return c.Resources != nil && c.Resources.ListChanged }),
		Subscribe:   anyOf(caps, func(c mcp.Capabilities) bool { return c.Resources != nil && c.Resources.Subscribe }),
	}
}

// Close ends every stream with the graceful-closure result and waits for
// them, up to ctx.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.closing)
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.streams.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("subscription streams still open")
	}
}

// The messages, built by hand: the fan-out encodes one per watcher.

func notification(method string, id json.RawMessage, extra string) []byte {
	b := make([]byte, 0, 128+len(extra))
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = strconv.AppendQuote(b, method)
	b = append(b, `,"params":{"_meta":{"io.modelcontextprotocol/subscriptionId":`...)
	b = append(b, id...)
	b = append(b, '}')
	b = append(b, extra...)
	return append(b, "}}"...)
}

func listChanged(id json.RawMessage) []byte {
	return notification(mcp.NotifyResourcesChanged, id, "")
}

func updated(id json.RawMessage, uri string) []byte {
	return notification(mcp.NotifyResourceUpdated, id, `,"uri":`+string(jsonrpc.Quote(uri)))
}

func acknowledged(id json.RawMessage, honoured mcp.SubscriptionFilter) []byte {
	f, _ := json.Marshal(honoured)
	return notification(mcp.NotifyAcknowledged, id, `,"notifications":`+string(f))
}

// closure is the listen request's result: the server ended it gracefully.
func closure(id json.RawMessage) []byte {
	res := `{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":` + string(id) + `}}`
	return jsonrpc.AppendResult(nil, id, []byte(res))
}
