package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// The subscription on the wire, as the watch (watch.go) keeps it: a modern
// server's subscriptions/listen stream, opened with the filter the wanted
// URIs and the server's capabilities make and replaced make before break;
// a legacy server's notification stream and its resources/subscribe set.

// filter is what a modern listen asks for: every list the server can report
// changes of, and the wanted URIs if it can report updates.
func (w *watch) filter(s *session) (mcp.SubscriptionFilter, uint64) {
	c := s.Capabilities
	var f mcp.SubscriptionFilter
	for _, lc := range mcp.ListChanges {
		*lc.Wanted(&f) = lc.Declared(c)
	}
	uris, v := w.watched()
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

func (w *watch) openListen(ctx context.Context, s *session, f mcp.SubscriptionFilter) *listenStream {
	lctx, cancel := context.WithCancel(ctx)
	ls := &listenStream{cancel: cancel, acked: newLatch(), done: make(chan struct{})}
	deliver := func(m *jsonrpc.Message) {
		if m.Method == mcp.NotifyAcknowledged {
			ls.acked.release()
			return
		}
		if ev, ok := eventOf(m); ok {
			w.emit(ev)
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
		params := w.x.tr.params(ctx, s, &mcp.Request{Method: mcp.MethodSubscriptions, Params: p})
		ls.err = w.conn.Listen(lctx, &transport.Exchange{
			Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: w.x.nextID(), Method: mcp.MethodSubscriptions, Params: params},
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

func (w *watch) modern(ctx context.Context, s *session) error {
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
		f, v := w.filter(s)
		if cur != nil && sameFilter(f, curF) {
			// A change signal for what the stream carries already (a
			// subscriber registered while this one was being opened): a
			// second stream would only open a gap in which an update
			// reaches the stream being closed.
			w.established(v)
		} else if next, err := w.replaceListen(ctx, s, cur, f); ctx.Err() != nil {
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
			w.log.Warn("upstream refused a changed subscription; keeping the current one", "err", err, "retryIn", delay)
			retry = time.After(delay)
			delay = min(delay*2, watchMax)
		} else {
			cur, curF, retry, delay = next, f, nil, watchMin
			w.established(v)
		}
		var done chan struct{}
		if cur != nil {
			done = cur.done
		}
		select {
		case <-w.changed:
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
func (w *watch) replaceListen(ctx context.Context, s *session, cur *listenStream, f mcp.SubscriptionFilter) (*listenStream, error) {
	if emptyFilter(f) {
		if cur != nil {
			cur.close()
		}
		return nil, nil
	}
	next := w.openListen(ctx, s, f)
	if err := next.await(ctx); err != nil {
		next.close()
		return nil, fmt.Errorf("subscriptions/listen: %w", err)
	}
	if cur != nil {
		cur.close()
	}
	return next, nil
}

func (w *watch) legacy(ctx context.Context, s *session) error {
	subscribed := map[string]bool{}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	open, done := w.legacyStream(sctx, s)
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
		v, err := w.syncLegacy(ctx, s, subscribed)
		if err != nil {
			return err
		}
		w.established(v)
		select {
		case <-w.changed:
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
func (w *watch) legacyStream(ctx context.Context, s *session) (open <-chan struct{}, done <-chan error) {
	opened, ended := newLatch(), make(chan error, 1)
	markOpen := func() { opened.release() }
	go func() {
		err := w.conn.Stream(ctx, s.ref(), markOpen)
		if errors.Is(err, transport.ErrNoStream) {
			// Nothing to watch for drops; notifications may still ride
			// on responses.
			w.log.Debug("upstream offers no notification stream")
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
func (w *watch) syncLegacy(ctx context.Context, s *session, subscribed map[string]bool) (uint64, error) {
	uris, v := w.watched()
	if s.Capabilities.Resources == nil || !s.Capabilities.Resources.Subscribe {
		return v, nil
	}
	want := map[string]bool{}
	for _, uri := range uris {
		want[uri] = true
	}
	for uri := range want {
		if !subscribed[uri] {
			if err := w.subscribe(ctx, s, mcp.MethodSubscribe, uri); err != nil {
				return v, err
			}
			subscribed[uri] = true
		}
	}
	for uri := range subscribed {
		if !want[uri] {
			if err := w.subscribe(ctx, s, mcp.MethodUnsubscribe, uri); err != nil {
				return v, err
			}
			delete(subscribed, uri)
		}
	}
	return v, nil
}

// subscribe sends a legacy session method (resources/subscribe or
// resources/unsubscribe) for uri; a refusal is logged, not failed.
func (w *watch) subscribe(ctx context.Context, s *session, method, uri string) error {
	cctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	params := w.x.tr.params(ctx, s, &mcp.Request{Method: method, Params: jsonrpc.Object{"uri": jsonrpc.Quote(uri)}})
	r, err := w.x.carry(cctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: w.x.nextID(), Method: method, Params: params},
		Version: s.Version, Session: s.id, Gen: s.gen,
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, uri, err)
	}
	if r.Error != nil {
		w.log.Warn("upstream refused a subscription change", "method", method, "uri", uri, "err", r.Error.Message)
	}
	return nil
}
