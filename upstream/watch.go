package upstream

import (
	"context"
	"errors"
	"fmt"
	"github.com/manifold-mcp/manifold/upstream/transport"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
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
// watched, and the loop that keeps one upstream subscription for all of them
// (plus list changes, always, because the cache depends on them).
type watch struct {
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

// Watch replaces the set of resource URIs (the upstream's own) to be told
// about, and returns its version for WaitWatched. The upstream subscription
// follows it; on a modern upstream the new subscription is acknowledged
// before the old one is closed, so no update falls in between.
func (u *Upstream) Watch(uris []string) uint64 {
	uris = slices.Clone(uris)
	slices.Sort(uris)
	uris = slices.Compact(uris)
	u.w.mu.Lock()
	defer u.w.mu.Unlock()
	if slices.Equal(uris, u.w.uris) {
		return u.w.want
	}
	u.w.uris = uris
	u.w.want++
	select {
	case u.w.changed <- struct{}{}:
	default:
	}
	return u.w.want
}

// WaitWatched waits until the upstream subscription carries version v of
// the watched set (or a later one), or ctx ends. It reports which.
func (u *Upstream) WaitWatched(ctx context.Context, v uint64) bool {
	for {
		u.w.mu.Lock()
		have, up := u.w.have, u.w.up
		u.w.mu.Unlock()
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
func (u *Upstream) watched() ([]string, uint64) {
	u.w.mu.Lock()
	defer u.w.mu.Unlock()
	return u.w.uris, u.w.want
}

// Capabilities returns what the server declared, without waiting: ok is
// false until the first negotiation. A session the server forgot (it
// restarted) leaves its capabilities in place until the next negotiation
// replaces them, so a caller arriving meanwhile is not told the server
// serves nothing.
func (u *Upstream) Capabilities() (mcp.Capabilities, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.known == nil {
		return mcp.Capabilities{}, false
	}
	return *u.known, true
}

func (u *Upstream) emit(ev Event) {
	if u.o.OnEvent != nil {
		u.o.OnEvent(u.o.Name, ev)
	}
}

// established is called when a watch carrying version v of the watched set
// is up; after a drop, or calls made before the first, it reports Missed.
func (u *Upstream) established(v uint64) {
	early := u.w.settled.release() && u.w.gaveUp.released()
	u.w.mu.Lock()
	dropped := u.w.dropped
	u.w.dropped = false
	if v > u.w.have {
		u.w.have = v
		close(u.w.up)
		u.w.up = make(chan struct{})
	}
	u.w.mu.Unlock()
	u.health.success()
	switch {
	case dropped:
		u.log.Info("upstream watch re-established; changes may have been missed")
		u.emit(Event{Kind: Missed})
	case early:
		u.log.Info("upstream watch up after calls were answered; changes may have been missed")
		u.emit(Event{Kind: Missed})
	}
}

// Watch-loop backoff after a drop: exponential with full jitter.
const (
	watchMin = 200 * time.Millisecond
	watchMax = 30 * time.Second
	ackWait  = 10 * time.Second
)

// watchLoop keeps the upstream subscription up until ctx ends.
func (u *Upstream) watchLoop(ctx context.Context) {
	delay := watchMin
	for ctx.Err() == nil {
		s, err := u.session(ctx)
		if err == nil {
			up := time.Now()
			if s.Modern {
				err = u.watchModern(ctx, s)
			} else {
				err = u.watchLegacy(ctx, s)
			}
			if time.Since(up) > watchMax {
				delay = watchMin
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, transport.ErrSessionGone) {
			u.forget(s)
		}
		u.w.mu.Lock()
		u.w.dropped = true
		u.w.mu.Unlock()
		u.w.settled.release()
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound {
			// It declared what it cannot deliver: nothing to watch there,
			// but it may be upgraded, so look again now and then.
			if delay < watchMax {
				u.log.Info("upstream does not serve subscriptions/listen; its changes cannot be watched", "err", err)
			}
			delay = watchMax
		} else {
			u.health.Failure(err)
			u.log.Debug("upstream watch down; retrying", "err", err, "in", delay)
		}
		select {
		case <-time.After(rand.N(delay) + delay/2):
		case <-u.w.wake:
		case <-ctx.Done():
			return
		}
		delay = min(delay*2, watchMax)
	}
}

// filter is what a modern listen asks for: every list the server can report
// changes of, and the wanted URIs if it can report updates.
func (u *Upstream) filter(s *session) (mcp.SubscriptionFilter, uint64) {
	c := s.Capabilities
	var f mcp.SubscriptionFilter
	for _, lc := range mcp.ListChanges {
		*lc.Wanted(&f) = lc.Declared(c)
	}
	uris, v := u.watched()
	if c.Resources != nil && c.Resources.Subscribe {
		f.ResourceSubscriptions = uris
	}
	return f, v
}

// sameFilter reports whether a and b ask for the same notifications.
func sameFilter(a, b mcp.SubscriptionFilter) bool {
	for _, lc := range mcp.ListChanges {
		if *lc.Wanted(&a) != *lc.Wanted(&b) {
			return false
		}
	}
	x, y := slices.Clone(a.ResourceSubscriptions), slices.Clone(b.ResourceSubscriptions)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func emptyFilter(f mcp.SubscriptionFilter) bool {
	for _, lc := range mcp.ListChanges {
		if *lc.Wanted(&f) {
			return false
		}
	}
	return len(f.ResourceSubscriptions) == 0
}

// listenStream is one subscriptions/listen on a modern upstream.
type listenStream struct {
	cancel context.CancelFunc
	acked  *latch
	done   chan struct{}
	err    error
}

func (u *Upstream) openListen(ctx context.Context, s *session, f mcp.SubscriptionFilter) *listenStream {
	lctx, cancel := context.WithCancel(ctx)
	ls := &listenStream{cancel: cancel, acked: newLatch(), done: make(chan struct{})}
	deliver := func(m *jsonrpc.Message) {
		if m.Method == mcp.NotifyAcknowledged {
			ls.acked.release()
			return
		}
		if ev, ok := eventOf(m); ok {
			u.emit(ev)
		}
	}
	go func() {
		defer close(ls.done)
		p := jsonrpc.Object{}
		err := p.Set("notifications", f)
		if err != nil {
			ls.err = err
			return
		}
		params := u.params(ctx, s, &mcp.Request{Method: mcp.MethodSubscriptions, Params: p})
		ls.err = u.conn.Listen(lctx, &transport.Exchange{
			Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.nextID(), Method: mcp.MethodSubscriptions, Params: params},
			Version: s.Version, Gen: s.gen,
		}, deliver)
	}()
	return ls
}

// await waits for the stream's acknowledgment.
func (ls *listenStream) await(ctx context.Context) error {
	select {
	case <-ls.acked.done():
		return nil
	case <-ls.done:
		if ls.err == nil {
			ls.err = errors.New("listen stream ended before its acknowledgment")
		}
		return ls.err
	case <-time.After(ackWait):
		ls.cancel()
		return errors.New("no acknowledgment of subscriptions/listen")
	case <-ctx.Done():
		ls.cancel()
		return ctx.Err()
	}
}

func (ls *listenStream) close() {
	ls.cancel()
	<-ls.done
}

func (u *Upstream) watchModern(ctx context.Context, s *session) error {
	var cur *listenStream
	defer func() {
		if cur != nil {
			cur.close()
		}
	}()
	var curF mcp.SubscriptionFilter
	var retry <-chan time.Time
	delay := watchMin
	for {
		f, v := u.filter(s)
		if cur != nil && sameFilter(f, curF) {
			// A change signal for what the stream carries already (a
			// subscriber registered while this one was being opened): a
			// second stream would only open a gap in which an update
			// reaches the stream being closed.
			u.established(v)
		} else if next, err := u.replaceListen(ctx, s, cur, f); ctx.Err() != nil {
			// Closing: what failed, if anything, was the watch being
			// stopped, not the upstream. The stream kept is closed on the
			// way out.
			if err == nil {
				cur = next
			}
			return nil
		} else if err != nil && cur == nil {
			return err
		} else if err != nil {
			// The change could not be made; the stream that works stays,
			// and the change is tried again.
			u.log.Warn("upstream refused a changed subscription; keeping the current one", "err", err, "retryIn", delay)
			retry = time.After(delay)
			delay = min(delay*2, watchMax)
		} else {
			cur, curF, retry, delay = next, f, nil, watchMin
			u.established(v)
		}
		var done chan struct{}
		if cur != nil {
			done = cur.done
		}
		select {
		case <-u.w.changed:
		case <-retry:
		case <-done:
			if cur.err == nil || errors.Is(cur.err, transport.ErrGracefulClose) {
				return errors.New("the upstream closed the subscription")
			}
			return cur.err
		case <-ctx.Done():
			return nil
		}
	}
}

// replaceListen makes the subscription carry f, make before break: a new
// stream is acknowledged before cur is closed. It returns the stream to keep
// (nil for an empty filter); on an error cur is left as it was.
func (u *Upstream) replaceListen(ctx context.Context, s *session, cur *listenStream, f mcp.SubscriptionFilter) (*listenStream, error) {
	if emptyFilter(f) {
		if cur != nil {
			cur.close()
		}
		return nil, nil
	}
	next := u.openListen(ctx, s, f)
	if err := next.await(ctx); err != nil {
		next.close()
		return nil, fmt.Errorf("subscriptions/listen: %w", err)
	}
	if cur != nil {
		cur.close()
	}
	return next, nil
}

func (u *Upstream) watchLegacy(ctx context.Context, s *session) error {
	subscribed := map[string]bool{}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	open, done := u.legacyStream(sctx, s)
	// The watch is up once the stream is open: a server drops what it
	// would announce while no stream is (the go-sdk's "stream not
	// connected"). One that never answers the stream is not held for it.
	select {
	case <-open:
	case err := <-done:
		return streamEnded(err)
	case <-time.After(ackWait):
	case <-ctx.Done():
		return nil
	}
	for {
		v, err := u.syncLegacy(ctx, s, subscribed)
		if err != nil {
			return err
		}
		u.established(v)
		select {
		case <-u.w.changed:
		case err := <-done:
			return streamEnded(err)
		case <-ctx.Done():
			return nil
		}
	}
}

// streamEnded is the watch's error for a legacy stream that ended with err.
func streamEnded(err error) error {
	if err == nil {
		return errors.New("notification stream ended")
	}
	return err
}

// legacyStream holds the stream that carries a legacy server's
// notifications (the GET stream of an HTTP session, the process's stdout
// for stdio): open is closed once it is open, or known not to exist, and
// done reports how it ended.
func (u *Upstream) legacyStream(ctx context.Context, s *session) (open <-chan struct{}, done <-chan error) {
	opened, ended := newLatch(), make(chan error, 1)
	markOpen := func() { opened.release() }
	go func() {
		err := u.conn.Stream(ctx, s.ref(), markOpen)
		if errors.Is(err, transport.ErrNoStream) {
			// Nothing to watch for drops; notifications may still ride
			// on responses.
			u.log.Debug("upstream offers no notification stream")
			markOpen()
			<-ctx.Done()
			err = nil
		}
		ended <- err
	}()
	return opened.done(), ended
}

// syncLegacy brings the session's resources/subscribe set to the wanted
// URIs and returns the version of the set it carries.
func (u *Upstream) syncLegacy(ctx context.Context, s *session, subscribed map[string]bool) (uint64, error) {
	uris, v := u.watched()
	if s.Capabilities.Resources == nil || !s.Capabilities.Resources.Subscribe {
		return v, nil
	}
	want := map[string]bool{}
	for _, uri := range uris {
		want[uri] = true
	}
	for uri := range want {
		if !subscribed[uri] {
			if err := u.legacySubscribe(ctx, s, mcp.MethodSubscribe, uri); err != nil {
				return v, err
			}
			subscribed[uri] = true
		}
	}
	for uri := range subscribed {
		if !want[uri] {
			if err := u.legacySubscribe(ctx, s, mcp.MethodUnsubscribe, uri); err != nil {
				return v, err
			}
			delete(subscribed, uri)
		}
	}
	return v, nil
}

func (u *Upstream) legacySubscribe(ctx context.Context, s *session, method, uri string) error {
	cctx, cancel := context.WithTimeout(ctx, u.o.Timeout)
	defer cancel()
	params := u.params(ctx, s, &mcp.Request{Method: method, Params: jsonrpc.Object{"uri": jsonrpc.Quote(uri)}})
	r, err := u.carry(cctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.nextID(), Method: method, Params: params},
		Version: s.Version, Session: s.id, Gen: s.gen,
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, uri, err)
	}
	if r.Error != nil {
		u.log.Warn("upstream refused a subscription change", "method", method, "uri", uri, "err", r.Error.Message)
	}
	return nil
}
