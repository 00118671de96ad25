package upstream

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// StartWatching keeps a subscription on the upstream from now until Close:
// list changes always, and the URIs given to Watch. Events go to
// Options.OnEvent. While the server is down it is also probed, every
// Options.ProbeInterval (probe.go). A server reached per principal is
// probed only: there is no caller to watch as.
func (u *Upstream) StartWatching() {
	ctx, cancel := context.WithCancel(context.Background())
	u.stopWatch = cancel
	u.watchDone = make(chan struct{})
	var loops sync.WaitGroup
	if !u.o.PerPrincipal {
		u.w.watching.Store(true)
		loops.Go(func() { u.watchLoop(ctx) })
	}
	loops.Go(func() { u.probeLoop(ctx) })
	go func() {
		loops.Wait()
		close(u.watchDone)
	}()
}

// endSession tells a legacy HTTP server, in the background, that a session
// Manifold stopped using is over, so sessions are not left behind.
func (u *Upstream) endSession(s *session) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		u.endSessionNow(ctx, s)
	}()
}

// endSessionNow ends s at a legacy HTTP server (DELETE) within ctx, as the
// principal that opened it toward a server reached per principal (only its
// token may end it); a principal's own process ends with its session.
func (u *Upstream) endSessionNow(ctx context.Context, s *session) {
	if s.as != nil {
		ctx = s.as(ctx)
	}
	_ = u.conn.EndSession(ctx, s.ref())
}

// Retire closes the upstream once the calls under way have ended (a
// reload removed or replaced it, and new requests no longer reach it), or
// when ctx ends, whichever comes first.
func (u *Upstream) Retire(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for u.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			u.log.Warn("closing a retired upstream with calls still under way", "calls", u.inflight.Load())
			return u.Close(context.WithoutCancel(ctx))
		case <-t.C:
		}
	}
	return u.Close(ctx)
}

// Close ends the session (DELETE for legacy HTTP) and stops a stdio process.
func (u *Upstream) Close(ctx context.Context) error {
	if u.stopWatch != nil {
		u.stopWatch()
		<-u.watchDone
		u.w.settled.release() // no watch is coming: a late call has none to wait for
	}
	s, others := u.pool.close() // no session kept after these
	// Ended before Close returns, a few at a time and within endingTime: a
	// server must not keep sessions no one will use, and a process
	// stopping must not leave requests behind, nor wait long on a server
	// (or an authorization server) that does not answer.
	ectx, cancel := context.WithTimeout(ctx, endingTime)
	defer cancel()
	var ending errgroup.Group
	ending.SetLimit(16)
	for _, o := range others {
		ending.Go(func() error { u.endSessionNow(ectx, o); return nil })
	}
	_ = ending.Wait()
	sid := ""
	if s != nil {
		sid = s.id
		if u.perPrincipal(s) {
			sid = "" // its negotiator's own session, ended with the others
		}
	}
	return u.conn.Close(ctx, sid)
}
