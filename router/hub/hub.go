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

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
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

// Subscription is one subscriber's registration and its queue of events.
type Subscription struct {
	// Honoured is the part of the requested filter Manifold delivers.
	Honoured mcp.SubscriptionFilter

	h         *Hub
	principal string              // its caller's principal ID; "" for one who did not authenticate
	charge    int64               // what it may hold, counted against MaxBytes
	claims    map[string][]string // its caller's, for the upstreams' access rules
	view      *upstream.View      // its endpoint's; nil: the main endpoint's
	lists     []*mcp.ListChange   // the list changes it is told of
	uris      map[string][]string // upstream → its own URIs watched
	events    chan Event
	ended     chan struct{}
	once      sync.Once
	err       error // why it ended; written before ended is closed
	closed    sync.Once
	gone      chan struct{} // closed by Close
	expiry    *time.Timer   // ends it when its caller's credential expires; nil if it does not
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

// Events delivers the subscription's events in order.
func (s *Subscription) Events() <-chan Event { return s.events }

// Ended is closed when the hub ends the subscription; Err then says why.
func (s *Subscription) Ended() <-chan struct{} { return s.ended }

// Err is ErrSlow, ErrClosing or ErrExpired once Ended is closed, and nil
// before.
func (s *Subscription) Err() error {
	select {
	case <-s.ended:
		return s.err
	default:
		return nil
	}
}

func (s *Subscription) end(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.ended)
	})
}

// Close releases the subscription and what it watched upstream. It is safe
// to call more than once.
func (s *Subscription) Close() {
	s.closed.Do(func() {
		if s.expiry != nil {
			s.expiry.Stop()
		}
		s.h.unregister(s)
		close(s.gone)
	})
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

func (s *Subscription) wants(lc *mcp.ListChange) bool {
	for _, l := range s.lists {
		if l == lc {
			return true
		}
	}
	return false
}

// send queues ev for s without ever blocking the fan-out; h.mu is held.
func (h *Hub) send(s *Subscription, ev Event) {
	select {
	case s.events <- ev:
	default:
		s.end(ErrSlow)
	}
}

// ackWait bounds how long Subscribe waits for the upstream subscriptions it
// promises, and for upstreams still negotiating.
const ackWait = 3 * time.Second

// Subscribe registers a subscriber for f. It returns once the upstream
// subscriptions it promises carry the new URIs (or after a short bound: an
// upstream that is down does not hold it up, and when its watch comes back
// the subscriber is told that anything may have changed).
func (h *Hub) Subscribe(ctx context.Context, f mcp.SubscriptionFilter) (*Subscription, error) {
	if n := len(f.ResourceSubscriptions); h.o.MaxURIs > 0 && n > h.o.MaxURIs {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "a subscription may name at most %d resources (subscriptions.max_uris_per_stream), not %d", h.o.MaxURIs, n)
	}
	for _, uri := range f.ResourceSubscriptions {
		if len(uri) > MaxURILen {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "a subscribed URI may be at most %d bytes", MaxURILen)
		}
	}
	// The caller's view: upstreams its endpoint does not hold or its access
	// rules hide are not watched, and their changes are not told.
	who, view := auth.From(ctx), upstream.ViewOf(ctx)
	s := &Subscription{h: h, view: view, uris: map[string][]string{}, events: make(chan Event, h.o.Queue), ended: make(chan struct{}), gone: make(chan struct{})}
	if who != nil {
		s.principal, s.claims = who.ID, who.Claims
	}
	set := h.o.Upstreams.Load().In(view).For(s.claims)
	caps := h.capabilities(ctx, set)
	s.honour(f, caps, set, h.o.Namespace)
	pending, err := h.register(s, set)
	if err != nil {
		return nil, err
	}
	if who != nil && !who.Expires.IsZero() {
		// The stream is the caller's only while its credential is good:
		// past that, its access rules would be read from claims no one
		// vouches for any more.
		s.expiry = time.AfterFunc(time.Until(who.Expires), func() { s.end(ErrExpired) })
	}
	wctx, cancel := context.WithTimeout(ctx, ackWait)
	defer cancel()
	for u, v := range pending {
		if !u.WaitWatched(wctx, v) {
			go h.catchUp(s, u, v)
		}
	}
	return s, nil
}

// catchUp tells s that its resources on u may have changed once u's watch
// finally carries them: the acknowledgment did not wait that long, so an
// update in between reached no one.
func (h *Hub) catchUp(s *Subscription, u *upstream.Upstream, v uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.ended:
		case <-s.gone:
		case <-ctx.Done():
		}
		cancel()
	}()
	if !u.WaitWatched(ctx, v) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, open := h.subs[s]; !open {
		return
	}
	for _, inner := range s.uris[u.Name()] {
		h.send(s, Event{URI: h.o.Namespace.Join(u.Name(), inner)})
	}
}

// honour decides what of f Manifold can deliver: a list change if Manifold
// serves the list (resources always; tools and prompts when an upstream
// does), whose changes it reports (its upstreams', when they report them,
// and a reload's, always); a URI if an upstream that can subscribe serves
// it.
func (s *Subscription) honour(f mcp.SubscriptionFilter, caps map[string]mcp.Capabilities, set *upstream.Set, ns namespace.Namespace) {
	for _, lc := range mcp.ListChanges {
		served := lc.List == mcp.MethodResourcesList || anyOf(caps, lc.Served)
		if _, known := mcp.Lookup(lc.List); known && served && *lc.Wanted(&f) {
			*lc.Wanted(&s.Honoured) = true
			s.lists = append(s.lists, lc)
		}
	}
	for _, uri := range f.ResourceSubscriptions {
		if !set.View().Shows(mcp.MethodResourcesRead, uri) {
			continue // outside the endpoint's view: as a URI nobody serves
		}
		targets := targets(uri, caps, set, ns)
		for name, inner := range targets {
			s.uris[name] = append(s.uris[name], inner)
		}
		if len(targets) > 0 {
			s.Honoured.ResourceSubscriptions = append(s.Honoured.ResourceSubscriptions, uri)
		}
	}
}

// register records s, reserving its slot under the bound, and returns the
// watch versions of the upstreams whose subscriptions changed.
func (h *Hub) register(s *Subscription, set *upstream.Set) (map[*upstream.Upstream]uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "shutting down")
	}
	if h.o.MaxStreams > 0 && len(h.subs) >= h.o.MaxStreams {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "too many open subscription streams")
	}
	s.charge = h.charge(s)
	if h.o.MaxBytes > 0 && h.held+s.charge > h.o.MaxBytes {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "open subscriptions hold all the memory they may (subscriptions.max_bytes); subscribe again later, or name fewer resources").
			WithData(map[string]any{"bound": "subscriptions.max_bytes", "limit": h.o.MaxBytes})
	}
	if err := h.checkWatched(s); err != nil {
		return nil, err
	}
	if err := h.checkShare(s); err != nil {
		return nil, err
	}
	pending := map[*upstream.Upstream]uint64{}
	h.subs[s] = struct{}{}
	h.held += s.charge
	h.take(s)
	for name, uris := range s.uris {
		for _, inner := range uris {
			if h.byURI[name] == nil {
				h.byURI[name] = map[string]map[*Subscription]struct{}{}
			}
			if h.byURI[name][inner] == nil {
				h.byURI[name][inner] = map[*Subscription]struct{}{}
			}
			h.byURI[name][inner][s] = struct{}{}
		}
		if u := set.Get(name); u != nil {
			pending[u] = h.resync(u)
		}
	}
	return pending, nil
}

// subscriptionOverhead is what a subscription holds whatever it names: its
// registration, its queue's slots, its frontend's stream.
const subscriptionOverhead = 4 << 10

// charge is what s may hold while it is open, an upper bound whether or not
// its subscriber reads: each URI it names is kept four times (in its own
// registration, in the hub's table, in the upstream's watch, in the
// request that carries the watch), and its queue may fill with events of
// its longest URI.
func (h *Hub) charge(s *Subscription) int64 {
	named, longest := 0, 256
	for _, uris := range s.uris {
		for _, u := range uris {
			named += len(u)
			longest = max(longest, len(u))
		}
	}
	return subscriptionOverhead + 4*int64(named) + int64(h.o.Queue)*int64(longest)
}

// checkWatched refuses a subscription that would make an upstream watch
// more than MaxWatched resources; h.mu is held.
func (h *Hub) checkWatched(s *Subscription) error {
	if h.o.MaxWatched <= 0 {
		return nil
	}
	for name, uris := range s.uris {
		added := 0
		for _, inner := range uris {
			if _, watched := h.byURI[name][inner]; !watched {
				added++
			}
		}
		if len(h.byURI[name])+added > h.o.MaxWatched {
			return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "upstream %s would watch more than %d resources (ten times subscriptions.max_uris_per_stream)", name, h.o.MaxWatched)
		}
	}
	return nil
}

func (h *Hub) unregister(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, open := h.subs[s]; open {
		h.held -= s.charge
		h.giveBack(s)
	}
	delete(h.subs, s)
	set := h.o.Upstreams.Load()
	for name, uris := range s.uris {
		for _, inner := range uris {
			delete(h.byURI[name][inner], s)
			if len(h.byURI[name][inner]) == 0 {
				delete(h.byURI[name], inner)
			}
		}
		if u := set.Get(name); u != nil {
			h.resync(u)
		}
	}
	if h.closed && len(h.subs) == 0 {
		close(h.drained)
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
