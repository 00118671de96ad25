package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// probeLoop asks the server, every ProbeInterval while it is down, whether
// it is back: readiness follows its return within the interval, traffic or
// not, where otherwise only the watch's reconnect backoff (tens of seconds
// into an outage) would look. A probe that finds it back wakes the watch,
// so its subscription is restored as soon. It runs until ctx ends.
func (u *Upstream) probeLoop(ctx context.Context) {
	if u.o.ProbeInterval <= 0 {
		return
	}
	t := time.NewTicker(u.o.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if u.health.current() != Down {
			continue
		}
		// Bounded by the interval (a second at least): a server that
		// swallows the probe must not hold off the next one for a whole
		// call timeout.
		pctx, cancel := context.WithTimeout(ctx, min(u.o.Timeout, max(u.o.ProbeInterval, time.Second)))
		err := u.probeOnce(pctx)
		cancel()
		if err == nil {
			u.wakeWatch()
		}
	}
}

// probeOnce contacts the server once and records the outcome in the health
// record: on the current session if there is one (a modern server's
// server/discover, a legacy one's ping), by negotiating otherwise or when
// the server forgot the session.
func (u *Upstream) probeOnce(ctx context.Context) error {
	u.mu.Lock()
	s := u.sess
	u.mu.Unlock()
	if s != nil && u.conn.alive(s.gen) {
		err := u.ping(ctx, s)
		if !errors.Is(err, errSessionGone) {
			if err != nil {
				u.health.failure(err)
			} else {
				u.health.success()
			}
			return err
		}
		u.forget(s)
	}
	_, err := u.session(ctx) // records the outcome itself
	return err
}

// ping asks the server for the least it can answer on session s: any
// answer, an error too, says it is there.
func (u *Upstream) ping(ctx context.Context, s *session) error {
	ex := &exchange{version: s.Version, session: s.id, gen: s.gen, idempotent: true}
	ex.msg = jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.nextID(), Method: mcp.MethodPing, Params: json.RawMessage(`{}`)}
	if s.Modern {
		ex.msg.Method = mcp.MethodDiscover
		ex.msg.Params = u.params(ctx, s, &mcp.Request{Method: mcp.MethodDiscover, Meta: jsonrpc.Object{}})
	}
	_, err := u.carry(ctx, ex)
	return err
}

// wakeWatch cuts the watch loop's reconnect backoff short.
func (u *Upstream) wakeWatch() {
	select {
	case u.w.wake <- struct{}{}:
	default:
	}
}
