// Package transport carries one upstream server's messages: over Streamable
// HTTP (either era), the 2024-11-05 HTTP+SSE transport, a process's stdio,
// or auto (Streamable HTTP, falling back to HTTP+SSE). Each is a Conn, in a
// file of its own; the supervisor keeps a channel (a process, a stream)
// open, and the pending-call table matches answers to calls on a channel
// that many calls share. Nothing here knows eras or sessions' meaning.
package transport

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"
)

// Options are what the transports need of one upstream's configuration.
type Options struct {
	// URL is the endpoint of a Streamable HTTP server (either era), or the
	// SSE endpoint of a 2024-11-05 HTTP+SSE one; Wire is how it is spoken
	// to (WireAuto, "", WireHTTP or WireSSE).
	URL  string
	Wire string
	// Header is sent with every HTTP request.
	Header http.Header
	// Transport carries the HTTP requests. Nil means net/http's pooled
	// transport, configured with TLS and MaxIdleConns.
	Transport http.RoundTripper
	// Authorize, if set, wraps the transport: each request then goes with
	// the credential of the caller it is made for.
	Authorize func(http.RoundTripper) http.RoundTripper
	TLS       *tls.Config
	// Retries is how many times an idempotent HTTP call is sent again
	// after a connection error or a 429/502/503/504.
	Retries int
	// MaxIdleConns is how many idle connections to the server are kept
	// (0: 64).
	MaxIdleConns int

	// Command, Env and Dir run a stdio server (stdio.go).
	Command []string
	Env     []string
	Dir     string
	// PerPrincipal, with Command, runs a process per principal, bounded by
	// MaxChildren and ChildIdle (children.go).
	PerPrincipal bool
	MaxChildren  int
	ChildIdle    time.Duration

	// Timeout bounds one call; MaxResponseBytes one message.
	Timeout          time.Duration
	MaxResponseBytes int64
}

// New returns the transport o describes, reporting to h, passing what the
// server sends that answers no call to onMsg. A stdio process is started
// at once, so that its startup overlaps the caller's.
func New(o Options, log *slog.Logger, onMsg OnMessage, h Health) (Conn, error) {
	switch {
	case len(o.Command) > 0:
		return newStdioConn(o, log, onMsg, h)
	case o.Wire == WireHTTP:
		return newHTTPConn(o, onMsg), nil
	case o.Wire == WireSSE:
		return newSSEConn(o, log, onMsg, h)
	}
	return newAutoConn(o, log, onMsg, h), nil
}
