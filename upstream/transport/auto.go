package transport

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
	// WireStdio is a process's stdin and stdout (Options.Command).
	WireStdio = "stdio"
)

// autoConn is WireAuto: Streamable HTTP until negotiation finds that the
// server speaks only HTTP+SSE, then HTTP+SSE for the upstream's life.
type autoConn struct {
	o      Options
	log    *slog.Logger
	onMsg  OnMessage
	health Health

	mu     sync.Mutex
	cur    Conn      // http, or the HTTP+SSE fallback
	http   *httpConn // Streamable HTTP, kept to go back to
	closed bool
}

// onSSE reports whether the fallback is in use; called with mu held.
func (a *autoConn) onSSE() bool { return a.cur != Conn(a.http) }

func newAutoConn(o Options, log *slog.Logger, onMsg OnMessage, health Health) *autoConn {
	h := newHTTPConn(o, onMsg)
	return &autoConn{o: o, log: log, onMsg: onMsg, health: health, cur: h, http: h}
}

func (a *autoConn) c() Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}

// OldTransport reports whether err, a Streamable HTTP initialize's, says
// the server does not take POSTs there: the sign of a 2024-11-05 server.
func OldTransport(err error) bool {
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
	_ = a.cur.Close(ctx, "")
	a.cur = a.http
}

func (a *autoConn) Wire() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.onSSE() {
		return WireSSE
	}
	return WireHTTP
}

func (a *autoConn) Ready(ctx context.Context) (uint64, error) { return a.c().Ready(ctx) }
func (a *autoConn) Alive(gen uint64) bool                     { return a.c().Alive(gen) }
func (a *autoConn) Scoped(modern bool) bool                   { return a.c().Scoped(modern) }

// EndSession ends a session of the transport in use.
func (a *autoConn) EndSession(ctx context.Context, s *Exchange) error {
	return a.c().EndSession(ctx, s)
}

// FallBack switches to HTTP+SSE when refused says the server takes no
// POSTs there, and keeps it only if its stream opens (settle).
func (a *autoConn) FallBack(ctx context.Context, refused error) (uint64, bool, error) {
	if !OldTransport(refused) || !a.fallBack() {
		return 0, false, nil
	}
	gen, err := a.c().Ready(ctx)
	a.settle(ctx, err == nil)
	return gen, true, err
}
func (a *autoConn) Call(ctx context.Context, ex *Exchange) (*Reply, error) {
	return a.c().Call(ctx, ex)
}
func (a *autoConn) Send(ctx context.Context, ex *Exchange) error { return a.c().Send(ctx, ex) }

// Close closes the transport in use; no fallback starts after it.
func (a *autoConn) Close(ctx context.Context, sid string) error {
	a.mu.Lock()
	a.closed = true
	c := a.cur
	a.mu.Unlock()
	return c.Close(ctx, sid)
}
func (a *autoConn) Stream(ctx context.Context, s *Exchange, opened func()) error {
	return a.c().Stream(ctx, s, opened)
}
func (a *autoConn) Listen(ctx context.Context, ex *Exchange, deliver func(*jsonrpc.Message)) error {
	return a.c().Listen(ctx, ex, deliver)
}
