// Package h1 is an HTTP/1.1 client transport that does each exchange on
// its caller's goroutine.
//
// net/http's Transport gives every connection a reader and a writer
// goroutine, and hands each request to the writer and each response from
// the reader across channels: every exchange wakes three goroutines
// several times. Here the caller writes the request into the connection's
// buffer (the bytes req.Write would, write.go), sends it in one write, and
// reads the response from the
// connection itself (http.ReadResponse, so every framing net/http knows is
// read the same way). The connection goes back to the idle pool when its
// body has been read to the end. A context that ends interrupts the
// exchange by moving the connection's deadline into the past, the way
// net/http interrupts its own reads.
//
// With no goroutine reading an idle connection, nothing notices a server
// closing it; a connection taken from the pool is therefore checked first
// with a non-blocking peek (one system call), and a request that finds a
// reused connection dead before a byte of answer is sent again on a new
// one where net/http's Transport would send it again: it was not written,
// or it is replayable and idempotent.
//
// The request is written whole before the answer is read: a server that
// answers early and closes (a 413) is still heard, but one that answers
// while it keeps reading a body too large for the sockets' buffers is not
// heard until it has read it all. Manifold's requests are small.
//
// It speaks plain http:// only. Anything else (https, a proxy) goes to
// Fallback.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Transport is an http.RoundTripper keeping idle connections per host. Its
// zero value is not usable: fill Fallback, or leave it nil to refuse what
// this transport does not carry.
type Transport struct {
	// Fallback carries every request that is not plain http://.
	Fallback http.RoundTripper
	// MaxIdle is how many idle connections are kept per host (0: 64).
	MaxIdle int
	// IdleTimeout is how long an idle connection is kept (0: 90 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the header of one response (0: 1 MiB).
	MaxHeaderBytes int64
	// Dial opens a connection (nil: a net.Dialer of 30 s timeout and 30 s
	// keep-alive, as net/http's default transport).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex
	idle    map[string][]*conn // per host:port, the most recently used last
	sweep   *time.Timer        // closes what has been idle too long; nil with nothing idle
	closing bool               // CloseIdleConnections was called, and no request came since
}

// conn is one connection and its buffers.
type conn struct {
	nc     net.Conn
	lr     headerLimit
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	reused bool
	sent   int64     // bytes that reached nc
	werr   error     // nc's last write error
	since  time.Time // when it went idle
}

// sentCounter is the writer under a connection's buffer: it counts what
// reached the connection, which says whether a failed request may be sent
// again (nothing of it left).
type sentCounter struct{ c *conn }

func (w sentCounter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	w.c.sent += int64(n)
	if err != nil {
		w.c.werr = err
	}
	return n, err
}

var errHeaderTooLarge = errors.New("h1: response header too large")

// aLongTimeAgo is a deadline that interrupts a blocked read or write.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		if t.Fallback == nil {
			closeBody(req)
			return nil, fmt.Errorf("h1: unsupported scheme %q", req.URL.Scheme)
		}
		return t.Fallback.RoundTrip(req)
	}
	if req.URL.Host == "" {
		closeBody(req)
		return nil, errors.New("h1: no host in request URL")
	}
	if err := sendable(req); err != nil {
		closeBody(req)
		return nil, err
	}
	addr := hostPort(req)
	for first := true; ; first = false {
		c, err := t.get(req.Context(), addr)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := t.exchange(c, req)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		if !first || !c.reused || !again(req, err) {
			closeBody(req)
			return nil, err
		}
		if req, err = rewound(req); err != nil {
			return nil, err
		}
	}
}

// exchange writes req on c and reads the response's header.
func (t *Transport) exchange(c *conn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	before := c.sent
	err := writeRequest(c.bw, req)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		if c.sent > before && c.werr != nil && ctx.Err() == nil {
			// The server may have answered and closed before taking the
			// whole body (a 413, a 401): that answer is the caller's.
			if resp, rerr := t.readHeader(c, req); rerr == nil {
				return t.answer(c, req, resp, stop, false), nil
			}
		}
		stop()
		if c.sent == before {
			return nil, contextOr(ctx, &notWritten{err})
		}
		return nil, contextOr(ctx, fmt.Errorf("h1: write request: %w", err))
	}
	resp, err := t.readHeader(c, req)
	if err != nil {
		stop()
		return nil, contextOr(ctx, err)
	}
	return t.answer(c, req, resp, stop, !resp.Close && !req.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close")), nil
}

// answer gives resp the body that pools c (if keep) or closes it at its
// end.
func (t *Transport) answer(c *conn, req *http.Request, resp *http.Response, stop func() bool, keep bool) *http.Response {
	b := &body{t: t, c: c, rc: resp.Body, stop: stop, ctx: req.Context(), keep: keep}
	if resp.Body == http.NoBody {
		b.finish(true, io.EOF)
		return resp
	}
	resp.Body = b
	return resp
}

// readHeader reads a response's header, at most MaxHeaderBytes of it,
// skipping informational (1xx) answers.
func (t *Transport) readHeader(c *conn, req *http.Request) (*http.Response, error) {
	c.lr.left, c.lr.read = t.maxHeaderBytes(), 0
	defer func() { c.lr.left = -1 }()
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			if c.lr.read == 0 {
				return nil, fmt.Errorf("%w: %w", errNothingRead, err)
			}
			return nil, fmt.Errorf("h1: read response: %w", err)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, errors.New("h1: the server switched protocols")
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			return resp, nil
		}
	}
}

// sendable refuses, as net/http's Transport does before it dials, a
// request whose method, header names or values it would not put on the
// wire (a NUL or DEL in a value); writeRequest itself turns CR and LF into
// spaces and drops bad names, as req.Write does, which suits a request the
// transport has already accepted.
func sendable(req *http.Request) error {
	if m := req.Method; m != "" && strings.IndexFunc(m, isNotToken) >= 0 {
		return fmt.Errorf("h1: invalid method %q", m)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

func isNotToken(r rune) bool { return !httpguts.IsTokenRune(r) }

// errNothingRead is a connection that ended before a byte of answer.
var errNothingRead = errors.New("h1: the server closed the connection before answering")

// notWritten is a request that could not be sent whole.
type notWritten struct{ err error }

func (e *notWritten) Error() string { return "h1: write request: " + e.err.Error() }
func (e *notWritten) Unwrap() error { return e.err }

// again says whether a request that failed with err on a reused connection
// may be sent once more on a new one: net/http's rule.
func again(req *http.Request, err error) bool {
	var nw *notWritten
	if errors.As(err, &nw) {
		return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	}
	return errors.Is(err, errNothingRead) && replayable(req)
}

func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// rewound is req with a fresh copy of its body.
func rewound(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("h1: rewind request body: %w", err)
	}
	r := *req
	r.Body = b
	return &r, nil
}

func contextOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

func hostPort(req *http.Request) string {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(host, port)
}

func (t *Transport) maxHeaderBytes() int64 {
	if t.MaxHeaderBytes > 0 {
		return t.MaxHeaderBytes
	}
	return 1 << 20
}

// headerLimit is a connection's reader, bounded while a header is read
// (left ≥ 0), unbounded otherwise (left < 0). read counts the bytes the
// current header's reading took from the connection.
type headerLimit struct {
	nc   net.Conn
	left int64
	read int64
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.nc.Read(p)
	}
	if l.left == 0 {
		return 0, errHeaderTooLarge
	}
	p = p[:min(int64(len(p)), l.left)]
	n, err := l.nc.Read(p)
	l.left -= int64(n)
	l.read += int64(n)
	return n, err
}
