package upstream

import (
	"context"
	"sync"
	"time"
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
		loops.Go(func() { u.w.loop(ctx) })
	}
	loops.Go(func() { u.prober.loop(ctx) })
	go func() {
		loops.Wait()
		close(u.watchDone)
	}()
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

// Close ends the sessions (DELETE for legacy HTTP) and stops a stdio
// process.
func (u *Upstream) Close(ctx context.Context) error {
	if u.stopWatch != nil {
		u.stopWatch()
		<-u.watchDone
		u.w.settled.release() // no watch is coming: a late call has none to wait for
	}
	sid := u.sessions.close(ctx) // no session kept after these
	return u.conn.Close(ctx, sid)
}
