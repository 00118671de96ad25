package hub

import (
	"context"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/upstream"
)

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

func (s *Subscription) wants(lc *mcp.ListChange) bool {
	for _, l := range s.lists {
		if l == lc {
			return true
		}
	}
	return false
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
