package upstream

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// EventKind says what an upstream announced.
type EventKind int

const (
	// ListChanged: the list Event.List names changed.
	ListChanged EventKind = iota + 1
	// ResourceUpdated: the resource at Event.URI changed.
	ResourceUpdated
	// Missed: the watch was re-established after a drop; anything may have
	// changed meanwhile.
	Missed
)

// Event is a change an upstream announced, in the upstream's own URIs.
type Event struct {
	Kind EventKind
	List *mcp.ListChange
	URI  string
}

// eventOf translates a server notification, from either era.
func eventOf(msg *jsonrpc.Message) (Event, bool) {
	if lc, ok := mcp.ListChangeOf(msg.Method); ok {
		return Event{Kind: ListChanged, List: lc}, true
	}
	if msg.Method == mcp.NotifyResourceUpdated {
		if uri, ok := jsonrpc.MemberString(msg.Params, "uri"); ok && uri != "" {
			return Event{Kind: ResourceUpdated, URI: uri}, true
		}
	}
	return Event{}, false
}

// watch is an Upstream's side of subscriptions: the URIs the hub wants
// watched, and the loop that keeps one upstream subscription for all of
// them (plus list changes, always, because the cache depends on them). On
// a modern server it is a subscriptions/listen stream, replaced make
// before break when the set changes (listen.go); on a legacy one, the
// session's notification stream and its resources/subscribe set. Its
// events go to emit; a watch re-established after a drop emits Missed.
type watch struct {
	sessions *sessions // the session watched, and forgotten when gone
	x        *exchanger
	conn     transport.Conn
	health   *health
	log      *slog.Logger
	emit     func(Event)
	timeout  time.Duration

	mu      sync.Mutex
	uris    []string      // wanted, sorted
	want    uint64        // version of uris
	have    uint64        // the version the upstream subscription carries
	up      chan struct{} // closed, and replaced, when have moves
	changed chan struct{} // signalled when uris changes
	wake    chan struct{} // signalled when a probe found the server back
	dropped bool          // a watch was up and went down: the next one reports Missed

	// Before the first watch is up, an upstream's change is told to no one.
	// A call waits a moment for the first watch to be settled (up, or an
	// attempt failed: then dropped says it); once one gave up waiting, the
	// first watch reports Missed, as a re-established one does.
	watching atomic.Bool
	settled  *latch
	gaveUp   *latch
}

// newWatch is a watch of no URIs, not started.
func newWatch(ss *sessions, x *exchanger, log *slog.Logger, timeout time.Duration) *watch {
	return &watch{
		sessions: ss, x: x, conn: ss.conn, health: ss.health, log: log, emit: x.emit, timeout: timeout,
		changed: make(chan struct{}, 1), wake: make(chan struct{}, 1), up: make(chan struct{}),
		settled: newLatch(), gaveUp: newLatch(),
	}
}

// latch is a channel closed once, by the first of any number of callers.
type latch struct {
	once sync.Once
	ch   chan struct{}
}

func newLatch() *latch { return &latch{ch: make(chan struct{})} }

// release closes l, reporting whether this call did.
func (l *latch) release() (first bool) {
	l.once.Do(func() { close(l.ch); first = true })
	return first
}

func (l *latch) done() <-chan struct{} { return l.ch }

func (l *latch) released() bool {
	select {
	case <-l.ch:
		return true
	default:
		return false
	}
}

// firstWatchWait bounds how long a call waits for the first watch: the
// watch is one round trip behind the session, but a server slow to
// acknowledge it must not hold every call until ackWait. A call waits at
// most half the time it has left, so the wait never costs it its answer.
const firstWatchWait = time.Second

// calling waits, before a call is sent, until the first watch is
// settled, and otherwise notes a call sent before it (gaveUp): then the
// Missed is due, and no call waits any longer. One that gave up after the
// first watch looked was sent after that watch's acknowledgment, so the
// watch covers it.
func (w *watch) calling(ctx context.Context) {
	if !w.watching.Load() || w.settled.released() || w.gaveUp.released() {
		return
	}
	wait := firstWatchWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/2)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.settled.done():
		return
	case <-w.gaveUp.done():
		return
	case <-ctx.Done():
	case <-t.C:
	}
	w.gaveUp.release()
}

// set replaces the wanted URIs (Upstream.Watch) and returns their version.
func (w *watch) set(uris []string) uint64 {
	uris = slices.Clone(uris)
	slices.Sort(uris)
	uris = slices.Compact(uris)
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Equal(uris, w.uris) {
		return w.want
	}
	w.uris = uris
	w.want++
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return w.want
}

// carries waits until the upstream subscription carries version v of the
// wanted URIs (or a later one), or ctx ends. It reports which.
func (w *watch) carries(ctx context.Context, v uint64) bool {
	for {
		w.mu.Lock()
		have, up := w.have, w.up
		w.mu.Unlock()
		if have >= v {
			return true
		}
		select {
		case <-up:
		case <-ctx.Done():
			return false
		}
	}
}

// watched returns the wanted URIs and their version.
func (w *watch) watched() ([]string, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.uris, w.want
}

// wakeUp cuts the watch loop's reconnect backoff short.
func (w *watch) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// established is called when a watch carrying version v of the watched set
// is up; after a drop, or calls made before the first, it reports Missed.
func (w *watch) established(v uint64) {
	early := w.settled.release() && w.gaveUp.released()
	w.mu.Lock()
	dropped := w.dropped
	w.dropped = false
	if v > w.have {
		w.have = v
		close(w.up)
		w.up = make(chan struct{})
	}
	w.mu.Unlock()
	w.health.success()
	switch {
	case dropped:
		w.log.Info("upstream watch re-established; changes may have been missed")
		w.emit(Event{Kind: Missed})
	case early:
		w.log.Info("upstream watch up after calls were answered; changes may have been missed")
		w.emit(Event{Kind: Missed})
	}
}

// Watch-loop backoff after a drop: exponential with full jitter.
const (
	watchMin = 200 * time.Millisecond
	watchMax = 30 * time.Second
	ackWait  = 10 * time.Second
)

// loop keeps the upstream subscription up until ctx ends.
func (w *watch) loop(ctx context.Context) {
	delay := watchMin
	for ctx.Err() == nil {
		s, err := w.sessions.server(ctx)
		if err == nil {
			up := time.Now()
			if s.Modern {
				err = w.modern(ctx, s)
			} else {
				err = w.legacy(ctx, s)
			}
			if time.Since(up) > watchMax {
				delay = watchMin
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, transport.ErrSessionGone) {
			w.sessions.forget(s)
		}
		w.mu.Lock()
		w.dropped = true
		w.mu.Unlock()
		w.settled.release()
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound {
			// It declared what it cannot deliver: nothing to watch there,
			// but it may be upgraded, so look again now and then.
			if delay < watchMax {
				w.log.Info("upstream does not serve subscriptions/listen; its changes cannot be watched", "err", err)
			}
			delay = watchMax
		} else {
			w.health.Failure(err)
			w.log.Debug("upstream watch down; retrying", "err", err, "in", delay)
		}
		select {
		case <-time.After(rand.N(delay) + delay/2):
		case <-w.wake:
		case <-ctx.Done():
			return
		}
		delay = min(delay*2, watchMax)
	}
}
