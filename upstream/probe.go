package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// prober tells the health record whether the server is there when no
// call says so: in a loop (loop), every Options.ProbeInterval while the
// server is down, on the negotiated session (ping) or by negotiating; a
// server reached per principal is asked as nobody (knock), and what it
// says of itself then is kept for ConnectDescription.
type prober struct {
	sessions *sessions
	x        *exchanger
	conn     transport.Conn
	health   *health
	wake     func() // cuts the watch's reconnect backoff short

	interval     time.Duration // Options.ProbeInterval
	timeout      time.Duration
	perPrincipal bool // Options.PerPrincipal: reached with each caller's own credential
	process      bool // a stdio server run as a process per principal

	mu      sync.Mutex
	knocked Info // what the latest knock learnt, with no caller's credential
}

// loop asks the server, every ProbeInterval while it is down, whether
// it is back: readiness follows its return within the interval, traffic or
// not, where otherwise only the watch's reconnect backoff (tens of seconds
// into an outage) would look. A probe that finds it back wakes the watch,
// so its subscription is restored as soon. A server reached per principal
// has no watch to see it go down, and no call of its own until a user has
// consented: it is probed every interval, from the start. A process run
// per principal is never started for nobody: it is not probed. It runs
// until ctx ends.
func (p *prober) loop(ctx context.Context) {
	if p.interval <= 0 || p.process {
		return
	}
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		if p.perPrincipal || p.health.current() == Down {
			// Bounded by the interval (a second at least): a server that
			// swallows the probe must not hold off the next one for a
			// whole call timeout.
			pctx, cancel := context.WithTimeout(ctx, min(p.timeout, max(p.interval, time.Second)))
			err := p.once(pctx)
			cancel()
			if err == nil {
				p.wake()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// once contacts the server once and records the outcome in the health
// record: on the current session if there is one (a modern server's
// server/discover, a legacy one's ping), by negotiating otherwise or when
// the server forgot the session; a server reached per principal, as no
// principal (knock).
func (p *prober) once(ctx context.Context) error {
	if p.perPrincipal {
		return p.knock(ctx)
	}
	if s := p.sessions.pool.get(theServer); s != nil && p.conn.Alive(s.gen) {
		err := p.ping(ctx, s)
		if !errors.Is(err, transport.ErrSessionGone) {
			if err != nil {
				p.health.Failure(err)
			} else {
				p.health.success()
			}
			return err
		}
		p.sessions.forget(s)
	}
	_, err := p.sessions.server(ctx) // records the outcome itself
	return err
}

// knock asks a server reached with each caller's own credential whether it
// is there, as nobody: a server/discover without a token, outside any
// session (those are its callers'). A protected server answers with its
// challenge (401), a JSON-RPC error is an answer too: either says it is up.
func (p *prober) knock(ctx context.Context) error {
	gen, err := p.conn.Ready(ctx)
	if err == nil {
		var s *session
		if s, err = p.sessions.hs.discover(oauth.Probing(ctx), gen); err == nil {
			p.mu.Lock()
			p.knocked = s.Info
			p.mu.Unlock()
		}
	}
	var se *StatusError
	var rpcErr *jsonrpc.Error
	if err == nil || errors.As(err, &se) && se.Status == http.StatusUnauthorized || errors.As(err, &rpcErr) {
		p.health.success()
		return nil
	}
	p.health.Failure(err)
	return err
}

// learnt is what the latest knock learnt of the server.
func (p *prober) learnt() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.knocked
}

// ping asks the server for the least it can answer on session s: any
// answer, an error too, says it is there.
func (p *prober) ping(ctx context.Context, s *session) error {
	ex := &transport.Exchange{Version: s.Version, Session: s.id, Gen: s.gen, Idempotent: true}
	ex.Msg = jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: p.x.nextID(), Method: mcp.MethodPing, Params: json.RawMessage(`{}`)}
	if s.Modern {
		ex.Msg.Method = mcp.MethodDiscover
		ex.Msg.Params = p.x.tr.params(ctx, s, &mcp.Request{Method: mcp.MethodDiscover, Meta: jsonrpc.Object{}})
	}
	_, err := p.x.carry(ctx, ex)
	return err
}
