package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/manifold-mcp/manifold/upstream/transport"
	"net/http"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
)

// probeLoop asks the server, every ProbeInterval while it is down, whether
// it is back: readiness follows its return within the interval, traffic or
// not, where otherwise only the watch's reconnect backoff (tens of seconds
// into an outage) would look. A probe that finds it back wakes the watch,
// so its subscription is restored as soon. A server reached per principal
// has no watch to see it go down, and no call of its own until a user has
// consented: it is probed every interval, from the start. A process run
// per principal is never started for nobody: it is not probed. It runs
// until ctx ends.
func (u *Upstream) probeLoop(ctx context.Context) {
	if u.o.ProbeInterval <= 0 || u.processPerPrincipal() {
		return
	}
	t := time.NewTicker(u.o.ProbeInterval)
	defer t.Stop()
	for {
		if u.o.PerPrincipal || u.health.current() == Down {
			// Bounded by the interval (a second at least): a server that
			// swallows the probe must not hold off the next one for a
			// whole call timeout.
			pctx, cancel := context.WithTimeout(ctx, min(u.o.Timeout, max(u.o.ProbeInterval, time.Second)))
			err := u.probeOnce(pctx)
			cancel()
			if err == nil {
				u.wakeWatch()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeOnce contacts the server once and records the outcome in the health
// record: on the current session if there is one (a modern server's
// server/discover, a legacy one's ping), by negotiating otherwise or when
// the server forgot the session; a server reached per principal, as no
// principal (knock).
func (u *Upstream) probeOnce(ctx context.Context) error {
	if u.o.PerPrincipal {
		return u.knock(ctx)
	}
	if s := u.pool.get(theServer); s != nil && u.conn.Alive(s.gen) {
		err := u.ping(ctx, s)
		if !errors.Is(err, transport.ErrSessionGone) {
			if err != nil {
				u.health.Failure(err)
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

// knock asks a server reached with each caller's own credential whether it
// is there, as nobody: a server/discover without a token, outside any
// session (those are its callers'). A protected server answers with its
// challenge (401), a JSON-RPC error is an answer too: either says it is up.
func (u *Upstream) knock(ctx context.Context) error {
	gen, err := u.conn.Ready(ctx)
	if err == nil {
		var s *session
		if s, err = u.discover(oauth.Probing(ctx), gen); err == nil {
			u.mu.Lock()
			u.knocked = s.Info
			u.mu.Unlock()
		}
	}
	var se *StatusError
	var rpcErr *jsonrpc.Error
	if err == nil || errors.As(err, &se) && se.Status == http.StatusUnauthorized || errors.As(err, &rpcErr) {
		u.health.success()
		return nil
	}
	u.health.Failure(err)
	return err
}

// ping asks the server for the least it can answer on session s: any
// answer, an error too, says it is there.
func (u *Upstream) ping(ctx context.Context, s *session) error {
	ex := &transport.Exchange{Version: s.Version, Session: s.id, Gen: s.gen, Idempotent: true}
	ex.Msg = jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.nextID(), Method: mcp.MethodPing, Params: json.RawMessage(`{}`)}
	if s.Modern {
		ex.Msg.Method = mcp.MethodDiscover
		ex.Msg.Params = u.params(ctx, s, &mcp.Request{Method: mcp.MethodDiscover, Meta: jsonrpc.Object{}})
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
