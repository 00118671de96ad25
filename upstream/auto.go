package upstream

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// The wire a URL upstream is spoken to over (Options.Wire).
const (
	// WireAuto probes Streamable HTTP and falls back to HTTP+SSE when the
	// server refuses its POSTs with 404 or 405, as the specification's
	// backwards-compatibility section describes.
	WireAuto = "auto"
	// WireHTTP is Streamable HTTP only (either era).
	WireHTTP = "http"
	// WireSSE is the 2024-11-05 HTTP+SSE transport only.
	WireSSE = "sse"
)

// autoConn is WireAuto: Streamable HTTP until negotiation finds that the
// server speaks only HTTP+SSE, then HTTP+SSE for the upstream's life.
type autoConn struct {
	o      Options
	log    *slog.Logger
	onMsg  onMessage
	health *health

	mu     sync.Mutex
	cur    conn      // http, or the HTTP+SSE fallback
	http   *httpConn // Streamable HTTP, kept to go back to
	closed bool
}

// onSSE reports whether the fallback is in use; called with mu held.
func (a *autoConn) onSSE() bool { return a.cur != conn(a.http) }

func newAutoConn(o Options, log *slog.Logger, onMsg onMessage, health *health) *autoConn {
	h := newHTTPConn(o, onMsg)
	return &autoConn{o: o, log: log, onMsg: onMsg, health: health, cur: h, http: h}
}

func (a *autoConn) c() conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}

// oldTransport reports whether err, a Streamable HTTP initialize's, says
// the server does not take POSTs there: the sign of a 2024-11-05 server.
func oldTransport(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Status == http.StatusNotFound || se.Status == http.StatusMethodNotAllowed)
}

// fallBack switches to HTTP+SSE and reports whether it did: not after
// close, nor when it already has.
func (a *autoConn) fallBack() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.onSSE() || a.closed {
		return false
	}
	c, err := newSSEConn(a.o, a.log, a.onMsg, a.health)
	if err != nil {
		return false
	}
	a.cur = c
	return true
}

// settle keeps HTTP+SSE if its stream opened (ok), else goes back to
// Streamable HTTP, so that a 404 of a moment (a rollout, an ingress
// reloading) does not pin a Streamable HTTP server to the wrong transport;
// the next negotiation tries again.
func (a *autoConn) settle(ctx context.Context, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.onSSE() {
		return
	}
	if ok {
		a.log.Info("upstream refuses Streamable HTTP (404/405) and opened an SSE stream: speaking the 2024-11-05 HTTP+SSE transport")
		return
	}
	_ = a.cur.close(ctx, "")
	a.cur = a.http
}

func (a *autoConn) wire() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.onSSE() {
		return WireSSE
	}
	return WireHTTP
}

func (a *autoConn) ready(ctx context.Context) (uint64, error) { return a.c().ready(ctx) }
func (a *autoConn) alive(gen uint64) bool                     { return a.c().alive(gen) }
func (a *autoConn) scoped(s *session) bool                    { return a.c().scoped(s) }
func (a *autoConn) call(ctx context.Context, ex *exchange) (*reply, error) {
	return a.c().call(ctx, ex)
}
func (a *autoConn) send(ctx context.Context, ex *exchange) error { return a.c().send(ctx, ex) }

// close closes the transport in use; no fallback starts after it.
func (a *autoConn) close(ctx context.Context, sid string) error {
	a.mu.Lock()
	a.closed = true
	c := a.cur
	a.mu.Unlock()
	return c.close(ctx, sid)
}
func (a *autoConn) stream(ctx context.Context, s *session, opened func()) error {
	return a.c().stream(ctx, s, opened)
}
func (a *autoConn) listen(ctx context.Context, ex *exchange, deliver func(*jsonrpc.Message)) error {
	return a.c().listen(ctx, ex, deliver)
}
