// Package hub fans each downstream subscription out to the upstreams and
// fans their notifications back in.
//
// A subscriber registers what it watches: lists (by the notification that
// reports their changes) and namespaced resource URIs. The hub keeps a
// reference count per upstream and URI and hands each upstream the set it
// must watch, so any number of subscribers of one URI cost that upstream one
// subscription, and the last one leaving releases it. Upstream notifications
// come back as events: the hub first invalidates the cache (so a subscriber
// that re-reads gets the new answer), then queues an Event, in the merged
// view, for every subscriber that wants it. A watch that was down and came
// back counts as a change to everything watched on that upstream.
//
// The hub knows no wire. A Subscription is a channel of events; each
// frontend writes them out in its own framing (a modern listen stream, a
// legacy session's GET stream, stdout). Each queue is bounded: a subscriber
// too slow to drain it is ended rather than allowed to hold memory, and can
// subscribe again.
package hub

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/upstream"
)

// Invalidator is the part of the cache the hub drives: an upstream's change
// makes its cached answers unreachable before anyone is told of it, and a
// watch that dropped and came back makes them stale.
type Invalidator interface {
	Invalidate(ctx context.Context, upstream, tag string)
	Revalidate(ctx context.Context, upstream string)
}

// Options configure a Hub.
type Options struct {
	Upstreams *upstream.Registry
	Namespace namespace.Namespace
	// Invalidator is told of every change first; may be nil.
	Invalidator Invalidator
	Logger      *slog.Logger
	// MaxStreams bounds the open subscriptions.
	MaxStreams int
	// Queue is how many events may wait for one slow subscriber. An event
	// carries at most one URI of at most MaxURILen bytes, so this bounds a
	// subscriber's queue in bytes too.
	Queue int
	// MaxURIs bounds the resources one subscription names; MaxWatched the
	// resources one upstream is asked to watch, in all. Zero: no bound.
	MaxURIs, MaxWatched int
	// MaxBytes bounds what all open subscriptions may hold together (see
	// charge); past it a new one is refused. Zero: no bound.
	MaxBytes int64
}

// MaxURILen bounds a URI a subscriber names.
const MaxURILen = 8 << 10

// Event is one change a subscriber is told of, in the merged view: a list
// (List set) or a resource (URI set).
type Event struct {
	List *mcp.ListChange
	URI  string
}

// Why a subscription ended.
var (
	ErrSlow    = errors.New("subscriber too slow: its queue overflowed")
	ErrClosing = errors.New("shutting down")
	ErrExpired = errors.New("the caller's credential expired: listen again with a fresh one")
)

// Hub is safe for concurrent use.
type Hub struct {
	o Options

	mu      sync.Mutex
	subs    map[*Subscription]struct{}
	byURI   map[string]map[string]map[*Subscription]struct{} // upstream → its URI → subscribers
	held    int64                                            // the charges of the open subscriptions
	shares  map[string]*share                                // what each principal holds (share.go)
	closed  bool
	drained chan struct{} // closed once closed and no subscription is left
}

// New returns a Hub.
func New(o Options) *Hub {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Queue <= 0 {
		o.Queue = 64
	}
	h := &Hub{o: o, subs: map[*Subscription]struct{}{}, byURI: map[string]map[string]map[*Subscription]struct{}{}, drained: make(chan struct{})}
	o.Upstreams.OnSwap(h.swapped)
	return h
}

// OnEvent receives an upstream's announcements (upstream.Options.OnEvent).
func (h *Hub) OnEvent(name string, ev upstream.Event) {
	h.invalidate(name, ev)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case upstream.ListChanged:
		for s := range h.subs {
			if s.wants(ev.List) && h.admits(s, name) {
				h.send(s, Event{List: ev.List})
			}
		}
	case upstream.ResourceUpdated:
		uri := h.o.Namespace.Join(name, ev.URI)
		for s := range h.byURI[name][ev.URI] {
			if h.admits(s, name) {
				h.send(s, Event{URI: uri})
			}
		}
	case upstream.Missed:
		for s := range h.subs {
			if !h.admits(s, name) {
				continue
			}
			for _, lc := range s.lists {
				h.send(s, Event{List: lc})
			}
			for _, inner := range s.uris[name] {
				h.send(s, Event{URI: h.o.Namespace.Join(name, inner)})
			}
		}
	}
}

// Connected tells the subscribers of the principals principal admits
// (by principal ID) that upstream name's lists changed for them alone:
// their user authorized it, and where one tool asked for the consent, the
// server's own tools, prompts and resources are listed now.
func (h *Hub) Connected(name string, principal func(id string) bool) {
	u := h.o.Upstreams.Load().Get(name)
	if u == nil {
		return
	}
	caps, known := u.Capabilities()
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.principal == "" || !principal(s.principal) || !h.admits(s, name) {
			continue
		}
		for _, lc := range s.lists {
			if lc.List == mcp.MethodToolsList || !known || lc.Served(caps) {
				h.send(s, Event{List: lc})
			}
		}
	}
}

// invalidate makes the cache forget what changed, before anyone is told:
// whoever is told of a change and reads again must not be served what
// changed.
func (h *Hub) invalidate(name string, ev upstream.Event) {
	inv := h.o.Invalidator
	if inv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch ev.Kind {
	case upstream.ListChanged:
		inv.Invalidate(ctx, name, ev.List.Tag)
		if ev.List.Results != "" {
			inv.Invalidate(ctx, name, ev.List.Results)
		}
	case upstream.ResourceUpdated:
		inv.Invalidate(ctx, name, mcp.URITag(ev.URI))
	case upstream.Missed:
		inv.Revalidate(ctx, name)
	}
}

// admits reports whether s's caller may hear of upstream name now: by the
// current set's rules, so an upstream a reload added is heard of, and one
// whose rules a reload tightened is not.
func (h *Hub) admits(s *Subscription, name string) bool {
	u := h.o.Upstreams.Load().Get(name)
	return u != nil && s.view.Holds(name) && u.Admits(s.claims)
}

// send queues ev for s without ever blocking the fan-out; h.mu is held.
// A search endpoint's tools never change (router/catalog.go): what changed
// is behind find_tools, and its callers are not told.
func (h *Hub) send(s *Subscription, ev Event) {
	if ev.List != nil && ev.List.List == mcp.MethodToolsList && s.view.Searches() {
		return
	}
	select {
	case s.events <- ev:
	default:
		s.end(ErrSlow)
	}
}

// resync hands an upstream the URIs it must watch: those with at least one
// subscriber. It returns the version of that set. h.mu is held.
func (h *Hub) resync(u *upstream.Upstream) uint64 {
	uris := make([]string, 0, len(h.byURI[u.Name()]))
	for inner := range h.byURI[u.Name()] {
		uris = append(uris, inner)
	}
	return u.Watch(uris)
}

// capabilities returns what each upstream declared, waiting (boundedly) for
// upstreams still negotiating: a subscription that arrives just after
// startup must not be refused for want of an answer yet to come.
func (h *Hub) capabilities(ctx context.Context, set *upstream.Set) map[string]mcp.Capabilities {
	ctx, cancel := context.WithTimeout(ctx, ackWait)
	defer cancel()
	out := make(map[string]mcp.Capabilities, len(set.All()))
	for _, u := range set.All() {
		c, ok := u.Capabilities()
		if !ok {
			info, err := u.Info(ctx)
			if err != nil && !u.AsksConsent() {
				continue
			}
			c = info.Capabilities
		}
		if u.AsksConsent() && c.Tools == nil {
			c.Tools = &mcp.ListCapability{} // its connect tool, until the caller consents
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

func canSubscribe(c mcp.Capabilities) bool { return c.Resources != nil && c.Resources.Subscribe }

// targets maps a namespaced URI to the upstreams that can tell of its
// changes, with the upstream's own URI. Without namespaces every upstream
// that can subscribe watches it. An upstream reached with each caller's own
// credential has no watch of its own to tell.
func targets(uri string, caps map[string]mcp.Capabilities, set *upstream.Set, ns namespace.Namespace) map[string]string {
	out := map[string]string{}
	watches := func(name string) bool {
		u := set.Get(name)
		c, known := caps[name]
		return u != nil && !u.PerPrincipal() && known && canSubscribe(c)
	}
	if ns.Prefix {
		if name, inner, ok := ns.Split(uri); ok && watches(name) {
			out[name] = inner
		}
		return out
	}
	for _, u := range set.All() {
		if watches(u.Name()) {
			out[u.Name()] = uri
		}
	}
	return out
}

// swapped follows a change of the upstream set (a reload), inside the
// registry's swap: each upstream of the new set is handed the URIs it must
// watch (a new client knows nothing of the subscribers its predecessor
// served; an unchanged one is told the same set again, which changes
// nothing), and each subscriber is told of every list the change changed
// in its view, as an upstream's own change would tell it.
func (h *Hub) swapped(old, next *upstream.Set) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, u := range next.All() {
		h.resync(u)
	}
	for s := range h.subs {
		for _, lc := range changedLists(old.In(s.view).For(s.claims), next.In(s.view).For(s.claims)) {
			if s.wants(lc) {
				h.send(s, Event{List: lc})
			}
		}
	}
}

// changedLists are the lists two views of the upstreams list differently:
// those an upstream that one has and the other has not (added, removed, or
// replaced by a reload) serves; all of them, for one whose capabilities
// are not known yet.
func changedLists(old, next *upstream.Set) []*mcp.ListChange {
	var out []*mcp.ListChange
	for _, lc := range mcp.ListChanges {
		if differsIn(lc, old, next) || differsIn(lc, next, old) {
			out = append(out, lc)
		}
	}
	return out
}

// differsIn reports whether an upstream of a that b does not hold serves
// lc's list.
func differsIn(lc *mcp.ListChange, a, b *upstream.Set) bool {
	for _, u := range a.All() {
		if b.Get(u.Name()) == u {
			continue
		}
		if c, known := u.Capabilities(); !known || lc.Served(c) {
			return true
		}
	}
	return false
}

// Open counts the subscriptions open now.
func (h *Hub) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// MaxURIs is the most resources one subscription may name (0: no bound).
func (h *Hub) MaxURIs() int { return h.o.MaxURIs }

// Close ends every subscription (ErrClosing) and waits, up to ctx, for their
// frontends to close them.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		if len(h.subs) == 0 {
			close(h.drained)
		}
	}
	for s := range h.subs {
		s.end(ErrClosing)
	}
	h.mu.Unlock()
	select {
	case <-h.drained:
		return nil
	case <-ctx.Done():
		return errors.New("subscription streams still open")
	}
}
