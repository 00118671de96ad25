package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/sse"
)

// sseConn speaks the HTTP+SSE transport of revision 2024-11-05: Manifold
// opens GET on the server's URL, the first event (`endpoint`) names where to
// POST messages, and every answer, notification and server request arrives
// on that one stream, matched to its call by id, as on a stdio server's
// stdout. So it is kept like stdioConn's child, by the same supervisor: one
// stream at a time, each a new generation, reopened after a drop with the
// same capped backoff and jitter; calls in flight when it drops fail as
// unreachable.
//
// The endpoint must be on the stream's own origin: a server (or whoever
// answers for it) cannot send Manifold's requests, with the callers'
// forwarded credentials, anywhere else.
type sseConn struct {
	o      Options
	log    *slog.Logger
	onMsg  OnMessage
	base   *url.URL
	client *http.Client
	health Health

	sup           supervisor[*sseStream]
	unknown       atomic.Int64 // answers to no call in flight
	unknownLogged atomic.Int64 // when that was last logged (UnixNano)
}

// sseStream is one open GET stream: one session of the server.
type sseStream struct {
	gen      uint64
	endpoint string
	cancel   context.CancelFunc // ends the GET

	pending pending
	exited  chan struct{} // closed once the stream has ended and calls failed
	// end says how the stream ended; set before exited is closed. The
	// supervisor and the watch of the stream learn of the end at the same
	// moment, and either may be the failing episode's one logged line.
	end error
}

// unknownLogEvery bounds the log of answers to no call.
const unknownLogEvery = 10 * time.Second

// ErrNoEndpoint: the server did not say where to post, in time or at all.
var ErrNoEndpoint = errors.New("no endpoint event")

// errStreamClosed: the stream ended with the call in flight.
var errStreamClosed = errors.New("SSE stream closed before answering")

func newSSEConn(o Options, log *slog.Logger, onMsg OnMessage, h Health) (*sseConn, error) {
	base, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	c := &sseConn{o: o, log: log, onMsg: onMsg, base: base, client: httpClient(o), health: h}
	// A stream that will not open or that drops is a failure of the
	// upstream's, summarized with its calls' (health.go).
	c.sup = supervisor[*sseStream]{
		open:  c.open,
		ended: func(s *sseStream) <-chan struct{} { return s.exited },
		stop:  func(s *sseStream) { s.cancel(); <-s.exited },
		failed: func(_ uint64, err error) {
			c.health.Failure(fmt.Errorf("SSE stream did not open: %w", err))
		},
		lost: func(s *sseStream, _ time.Duration) { c.health.Failure(s.end) },
		down: errStreamClosed,
	}
	c.sup.start()
	return c, nil
}

// open sends the GET and waits, within the upstream's timeout, for the
// endpoint event.
func (c *sseConn) open(gen uint64) (*sseStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(c.o.Timeout, cancel)
	resp, err := c.get(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	rd := sse.NewReader(resp.Body, int(c.o.MaxResponseBytes))
	endpoint, err := c.endpoint(rd)
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("%w within %s", ErrNoEndpoint, c.o.Timeout)
	}
	if err != nil {
		cancel()
		resp.Body.Close()
		return nil, err
	}
	s := &sseStream{gen: gen, endpoint: endpoint, cancel: cancel, exited: make(chan struct{})}
	if !c.health.Failing() {
		c.log.Info("upstream SSE stream open", "generation", gen, "endpoint", endpoint)
	}
	go func() {
		cause := c.readLoop(s, rd)
		cancel()
		resp.Body.Close()
		s.end = fmt.Errorf("SSE stream %d ended (%v); reconnecting: %w", s.gen, cause, errStreamClosed)
		s.pending.fail()
		close(s.exited)
	}()
	return s, nil
}

func (c *sseConn) get(ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.o.URL, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range c.o.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	if ct := mcp.MediaType(resp.Header.Get("Content-Type")); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, &StatusError{Status: resp.StatusCode, Body: fmt.Sprintf("%s (Content-Type %q)", bytes.TrimSpace(b), resp.Header.Get("Content-Type"))}
	}
	return resp, nil
}

// endpoint reads events up to the endpoint event and resolves its URL
// against the stream's; it must be on the same origin.
func (c *sseConn) endpoint(rd *sse.Reader) (string, error) {
	for {
		ev, err := rd.Next()
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoEndpoint, err)
		}
		if ev.Name != "endpoint" {
			continue // nothing can be answered before it
		}
		u, err := c.base.Parse(strings.TrimSpace(string(ev.Data)))
		if err != nil {
			return "", fmt.Errorf("malformed endpoint event %.100q: %w", ev.Data, err)
		}
		if !sameOrigin(u, c.base) {
			return "", fmt.Errorf("endpoint %s is not on the stream's origin %s://%s: refused", u.Redacted(), c.base.Scheme, c.base.Host)
		}
		return u.String(), nil
	}
}

// readLoop passes each message event on, until the stream ends or breaks
// its bounds (an event over max_response_bytes ends it), and returns why
// it stopped reading.
func (c *sseConn) readLoop(s *sseStream, rd *sse.Reader) error {
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, sse.ErrTooLarge) {
				c.log.Warn("upstream SSE event larger than max_response_bytes; dropping the stream", "limit", c.o.MaxResponseBytes)
			}
			return err
		}
		if ev.Name != "" && ev.Name != "message" {
			continue
		}
		c.dispatch(s, ev.Data)
	}
}

func (c *sseConn) dispatch(s *sseStream, data []byte) {
	m, rpcErr := jsonrpc.Decode(data)
	if rpcErr != nil {
		c.log.Warn("upstream sent an event that is not a JSON-RPC message", "err", rpcErr.Message)
		return
	}
	if !m.IsResponse() {
		c.onMsg(context.Background(), s.gen, m, nil, func(answer *jsonrpc.Message, header http.Header) {
			// Off the read loop, and bounded: a POST that stalls must not
			// stop the stream's answers from being read.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
				defer cancel()
				_ = c.post(ctx, s, answer.Encode(), header)
			}()
		})
		return
	}
	if !s.pending.answer(m) {
		// A late answer to a call that gave up, or a made-up id: logged at
		// most every unknownLogEvery, with the count, so a flood cannot
		// flood the log.
		n := c.unknown.Add(1)
		if last := c.unknownLogged.Load(); time.Since(time.Unix(0, last)) >= unknownLogEvery && c.unknownLogged.CompareAndSwap(last, time.Now().UnixNano()) {
			c.log.Warn("upstream answered a call not in flight", "id", fmt.Sprintf("%.64s", m.ID), "count", n)
		}
	}
}

// post sends one encoded message to the endpoint; the answer, if any,
// comes on the stream. header holds the caller headers forwarded with it.
func (c *sseConn) post(ctx context.Context, s *sseStream, body []byte, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range c.o.Header {
		req.Header[k] = v
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &StatusError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(b))}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

func (c *sseConn) current() *sseStream {
	s, _ := c.sup.current()
	return s
}

func (c *sseConn) Ready(ctx context.Context) (uint64, error) { return c.sup.ready(ctx) }

func (c *sseConn) Scoped(bool) bool { return false }

func (c *sseConn) Wire() string { return WireSSE }

func (c *sseConn) FallBack(context.Context, error) (uint64, bool, error) { return 0, false, nil }

// EndSession ends nothing: the session is the stream, which the
// supervisor keeps.
func (c *sseConn) EndSession(context.Context, *Exchange) error { return nil }

func (c *sseConn) Alive(gen uint64) bool { return c.sup.alive(gen) }

func (c *sseConn) Call(ctx context.Context, ex *Exchange) (*Reply, error) {
	s := c.current()
	if s == nil || s.gen != ex.Gen {
		return nil, ErrSessionGone
	}
	m, ok, err := s.pending.call(ctx, ex.Msg.ID, func() error { return c.post(ctx, s, ex.Msg.Encode(), ex.Header) },
		func(cause error) { c.cancel(s, ex.Msg.ID, cause) })
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errStreamClosed
	}
	return &Reply{Message: m}, nil
}

// cancel tells the server the caller gave up, so it can stop working.
func (c *sseConn) cancel(s *sseStream, id json.RawMessage, cause error) {
	ctx, done := context.WithTimeout(context.Background(), c.o.Timeout)
	defer done()
	_ = c.post(ctx, s, cancelled(id, cause), nil)
}

func (c *sseConn) Send(ctx context.Context, ex *Exchange) error {
	s := c.current()
	if s == nil || (ex.Gen != 0 && s.gen != ex.Gen) {
		return ErrSessionGone
	}
	return c.post(ctx, s, ex.Msg.Encode(), ex.Header)
}

// Close stops the supervisor, which ends the stream, and waits for it.
func (c *sseConn) Close(ctx context.Context, _ string) error {
	if err := c.sup.close(ctx, nil); err != nil {
		return fmt.Errorf("closing the SSE stream: %w", err)
	}
	return nil
}

// Listen: a 2024-11-05 server has no subscriptions/listen.
func (c *sseConn) Listen(context.Context, *Exchange, func(*jsonrpc.Message)) error {
	return ErrNoStream
}

// Stream waits for the stream the session belongs to: it carries the
// session's notifications, already read by readLoop.
func (c *sseConn) Stream(ctx context.Context, s *Exchange, opened func()) error {
	st := c.current()
	if st == nil || st.gen != s.Gen {
		return ErrSessionGone
	}
	opened()
	select {
	case <-ctx.Done():
		return nil
	case <-st.exited:
		return SessionEnded(st.end)
	}
}
