package transport

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/internal/sse"
)

// httpConn carries exchanges over Streamable HTTP, both eras.
type httpConn struct {
	url     string
	u       *url.URL // url parsed, nil if it does not parse
	headers http.Header
	limit   int64
	plain   *http.Client          // every first attempt
	retry   *retryablehttp.Client // an idempotent call's retries, after a first attempt failed
	retries int
	onMsg   OnMessage
}

// httpClient is the client of an HTTP upstream: o.Transport, or net/http's
// pooled transport with the upstream's TLS, keeping MaxIdleConns (64 unless
// configured) idle connections per host: a gateway's callers share one
// upstream, and concurrent calls must not each dial and close.
func httpClient(o Options) *http.Client {
	rt := o.Transport
	if rt == nil {
		tr := cleanhttp.DefaultPooledTransport()
		tr.ResponseHeaderTimeout = 0 // calls are bounded by their context
		tr.MaxIdleConnsPerHost = cmp.Or(o.MaxIdleConns, 64)
		tr.MaxIdleConns = max(tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
		tr.TLSClientConfig = o.TLS
		rt = tr
	}
	if o.Authorize != nil {
		rt = o.Authorize(rt)
	}
	return &http.Client{Transport: rt, CheckRedirect: redirectSameOrigin}
}

// redirectSameOrigin follows a redirect only within the origin it started
// from (sameOrigin), and a POST's only where it is repeated as it was (307,
// 308): a 301, 302 or 303 may answer a POST that was served, and following
// it would turn the call into a GET of the Location, on an MCP endpoint a
// stream that is no answer to it. That redirect is then the answer, and
// fails the call naming where it pointed (statusError).
func redirectSameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if first := via[0].URL; !sameOrigin(req.URL, first) {
		return fmt.Errorf("refused a redirect from %s://%s to another origin, %s://%s", first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
	}
	if via[len(via)-1].Method == http.MethodPost && req.Method != http.MethodPost {
		return http.ErrUseLastResponse
	}
	return nil
}

func newHTTPConn(o Options, onMsg OnMessage) *httpConn {
	plain := httpClient(o)
	rc := retryablehttp.NewClient()
	rc.HTTPClient = plain
	rc.Logger = nil                   // request URLs and headers are not for the log
	rc.RetryMax = max(o.Retries-1, 0) // after the first retry (retryAfter)
	rc.RetryWaitMin = 50 * time.Millisecond
	rc.RetryWaitMax = 500 * time.Millisecond
	rc.CheckRetry = checkRetry
	rc.Backoff = backoff
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	rc.RequestLogHook = func(_ retryablehttp.Logger, r *http.Request, attempt int) {
		if attempt > 0 {
			trace.SpanFromContext(r.Context()).SetAttributes(attribute.Int("manifold.upstream.retries", attempt))
		}
	}
	u, err := url.Parse(o.URL)
	if err != nil || u.Host == "" {
		u = nil // refused per request, as NewRequest refuses it
	}
	return &httpConn{url: o.URL, u: u, headers: o.Header.Clone(), limit: o.MaxResponseBytes, retry: rc, retries: o.Retries, plain: plain, onMsg: onMsg}
}

// maxRetryWait caps the wait before a retry, Retry-After included: a server
// asking for a minute must not hold a read that a stale entry could answer.
const maxRetryWait = time.Second

// checkRetry retries connection failures and the statuses that say "try
// again": never a 500 (the server ran the request and failed), never after
// the caller gave up, and never when the wait would outlast the call's
// deadline (the failure is better answered now).
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return !oauth.Unsent(err), nil
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	default:
		return false, nil
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < backoff(0, maxRetryWait, 0, resp) {
		return false, nil
	}
	return true, nil
}

// backoff is retryablehttp's (exponential, or what Retry-After says),
// capped at maxRetryWait.
func backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	return min(retryablehttp.DefaultBackoff(lo, hi, attempt, resp), maxRetryWait)
}

func (c *httpConn) Ready(context.Context) (uint64, error) { return 0, nil }

// Scoped: a modern server answers on the request's own stream; a legacy
// session's server may send progress on its GET stream instead.
func (c *httpConn) Scoped(modern bool) bool { return modern }

func (c *httpConn) Wire() string { return WireHTTP }

func (c *httpConn) FallBack(context.Context, error) (uint64, bool, error) { return 0, false, nil }

// EndSession ends a legacy session with DELETE; a modern one has none.
func (c *httpConn) EndSession(ctx context.Context, s *Exchange) error {
	if s.Session == "" {
		return nil
	}
	return c.deleteSession(ctx, s.Session)
}
func (c *httpConn) Alive(uint64) bool { return true }

func (c *httpConn) request(ctx context.Context, ex *Exchange) (*http.Response, error) {
	// Not json.Marshal: that validates and compacts every member again. (A
	// stdio line must be compact; an HTTP body need not be.)
	req, err := c.newPost(ctx, ex.Msg.Encode())
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	h := req.Header
	for k, v := range c.headers {
		h[k] = v
	}
	for k, v := range ex.Header { // the caller's own credentials win
		h[k] = v
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
	if ex.Version != "" && mcp.HasVersionHeader(ex.Version) {
		h.Set(mcp.HeaderProtocolVersion, ex.Version)
	}
	if ex.Session != "" {
		h.Set(mcp.HeaderSessionID, ex.Session)
	}
	if ex.Version == mcp.Version {
		h.Set(mcp.HeaderMethod, mcp.EncodeHeader(ex.Msg.Method))
		if ex.Name != "" {
			h.Set(mcp.HeaderName, mcp.EncodeHeader(ex.Name))
		}
	}
	resp, err := c.do(req)
	if !ex.Idempotent || c.retries == 0 {
		return resp, err
	}
	if again, _ := checkRetry(ctx, resp, err); !again {
		return resp, err
	}
	return c.retryAfter(ctx, req, resp)
}

// newPost is http.NewRequestWithContext's POST of body to the upstream,
// from the URL parsed once (c.u; the transport only reads it).
func (c *httpConn) newPost(ctx context.Context, body []byte) (*http.Request, error) {
	if c.u == nil {
		return http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	}
	req := &http.Request{
		Method: http.MethodPost, URL: c.u, Host: c.u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        make(http.Header, 8),
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
	}
	return req.WithContext(ctx), nil
}

// do is c.plain.Do(req) without the client's work for redirects (a copy
// of the request's headers for each hop, and the rest: 2 µs of a hop's
// 137, measured) unless a 307 or 308 comes back: the redirect is then set
// aside and the request sent through the client, which follows it
// (redirectSameOrigin). Those two say the request was not served and is
// to be repeated as it was, so sending it again is safe; any other answer,
// a 301, 302 or 303 included, is the call's. Errors read as the client's
// do.
func (c *httpConn) do(req *http.Request) (*http.Response, error) {
	resp, err := c.plain.Transport.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: "Post", URL: req.URL.Redacted(), Err: err}
	}
	if !repeat(resp) {
		return resp, nil
	}
	drain(resp.Body)
	resp.Body.Close()
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	again := req.Clone(req.Context())
	again.Body = body
	return c.plain.Do(again)
}

// repeat says whether resp redirects its request to be sent again, as it
// was, elsewhere.
func repeat(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return resp.Header.Get("Location") != ""
	}
	return false
}

// retryAfter sends again, with the retry machinery, an idempotent request
// whose first attempt failed in a way that says "try again": only then is
// it paid for (the first attempt goes straight to the client).
func (c *httpConn) retryAfter(ctx context.Context, req *http.Request, failed *http.Response) (*http.Response, error) {
	wait := backoff(c.retry.RetryWaitMin, c.retry.RetryWaitMax, 0, failed)
	if failed != nil {
		drain(failed.Body)
		failed.Body.Close()
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	again := req.Clone(ctx)
	again.Body = body
	rr, err := retryablehttp.FromRequest(again)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	return c.retry.Do(rr)
}

func (c *httpConn) Call(ctx context.Context, ex *Exchange) (*Reply, error) {
	r, err := c.roundTrip(ctx, ex)
	if err != nil && ctx.Err() != nil && ex.Version != mcp.Version && !ex.Initial {
		// A legacy server does not take a dropped connection for a
		// cancellation (a modern one does): tell it, so it stops working.
		go c.cancelled(ex, ctx.Err())
	}
	return r, err
}

func (c *httpConn) cancelled(ex *Exchange, cause error) {
	b, err := jsonrpc.Notification(mcp.NotifyCancelled, map[string]any{"requestId": ex.Msg.ID, "reason": cause.Error()})
	if err != nil {
		return
	}
	var m jsonrpc.Message
	_ = json.Unmarshal(b, &m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Send(ctx, &Exchange{Msg: m, Version: ex.Version, Session: ex.Session, Header: ex.Header})
}

func (c *httpConn) roundTrip(ctx context.Context, ex *Exchange) (*Reply, error) {
	resp, err := c.request(ctx, ex)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := &Reply{SessionID: resp.Header.Get(mcp.HeaderSessionID)}
	if resp.StatusCode == http.StatusNotFound && ex.Session != "" {
		drain(resp.Body)
		return nil, ErrSessionGone
	}
	ct := mcp.MediaType(resp.Header.Get("Content-Type"))
	switch {
	case ct == "text/event-stream" && resp.StatusCode == http.StatusOK:
		r.Message, err = c.readStream(ctx, resp.Body, ex)
	case ct == "application/json":
		r.Message, err = c.readJSON(resp, ex)
	default:
		return nil, statusError(resp, c.limit)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// readJSON reads a single JSON response. A non-2xx status is accepted when
// the body is a JSON-RPC error for this request: modern servers answer
// protocol errors with 400 and a body.
func (c *httpConn) readJSON(resp *http.Response, ex *Exchange) (*jsonrpc.Message, error) {
	body, err := readLimited(resp.Body, resp.ContentLength, c.limit)
	if err != nil {
		return nil, err
	}
	m, rpcErr := jsonrpc.Decode(body)
	if rpcErr != nil || !m.IsResponse() {
		return nil, &StatusError{Status: resp.StatusCode, Body: snippet(body)}
	}
	if resp.StatusCode/100 != 2 && m.Error == nil {
		return nil, &StatusError{Status: resp.StatusCode, Body: snippet(body)}
	}
	if !bytes.Equal(m.ID, ex.Msg.ID) {
		// An answer to no request (id null, or another id) is not this
		// request's answer, whatever it says.
		return nil, &StatusError{Status: resp.StatusCode, Body: fmt.Sprintf("response id %s does not match request id %s", m.ID, ex.Msg.ID)}
	}
	return m, nil
}

// readStream reads an SSE response until the response to ex arrives,
// handing notifications to ex.notify and answering server requests.
func (c *httpConn) readStream(ctx context.Context, body io.Reader, ex *Exchange) (*jsonrpc.Message, error) {
	var resp *jsonrpc.Message
	err := c.events(ctx, body, func(m *jsonrpc.Message) error {
		switch {
		case m.IsResponse() && bytes.Equal(m.ID, ex.Msg.ID):
			resp = m
			return errStreamDone
		case m.IsNotification() && ex.Notify != nil && requestScoped(m.Method):
			ex.Notify(m)
		case m.IsRequest() && ex.Ask == nil:
			// A question on a call's own stream is that call's, and its
			// caller cannot be asked.
			c.onMsg(ctx, ex.Gen, m, CannotAsk, func(a *jsonrpc.Message, _ http.Header) { go c.answer(context.WithoutCancel(ctx), ex, a, ex.Header) })
		default:
			c.serverMessage(ctx, ex, m)
		}
		return nil
	})
	if resp != nil {
		return resp, nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return nil, fmt.Errorf("stream ended before the response: %w", err)
}

var errStreamDone = errors.New("response received")

// serverMessage hands what the server sent, other than the exchange's own
// answer, to onMsg (a request on a call's own stream is that call's
// question), and sends back the answer, if any, on the same session, with
// the headers of the call it answers for: ex's own on its stream, those
// the router attributed it to on the session's GET stream (shared).
func (c *httpConn) serverMessage(ctx context.Context, ex *Exchange, m *jsonrpc.Message) {
	c.onMsg(ctx, ex.Gen, m, ex.Ask, func(answer *jsonrpc.Message, header http.Header) {
		if ex.Ask != nil {
			header = ex.Header
		}
		go c.answer(context.WithoutCancel(ctx), ex, answer, header)
	})
}

// requestScoped reports whether a notification belongs to the call whose
// stream carried it rather than to a subscription.
func requestScoped(method string) bool {
	return method == mcp.NotifyProgress || method == mcp.NotifyMessage
}

func (c *httpConn) answer(ctx context.Context, ex *Exchange, answer *jsonrpc.Message, header http.Header) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = c.Send(ctx, &Exchange{Msg: *answer, Version: ex.Version, Session: ex.Session, Header: header})
}

func (c *httpConn) Send(ctx context.Context, ex *Exchange) error {
	resp, err := c.request(ctx, ex)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	drain(resp.Body)
	if resp.StatusCode/100 != 2 {
		return &StatusError{Status: resp.StatusCode}
	}
	return nil
}

// Close ends a legacy session with DELETE, as the transport asks.
func (c *httpConn) Close(ctx context.Context, sid string) error {
	defer c.plain.CloseIdleConnections()
	if sid == "" {
		return nil
	}
	return c.deleteSession(ctx, sid)
}

func (c *httpConn) deleteSession(ctx context.Context, sid string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url, nil)
	if err != nil {
		return fmt.Errorf("build DELETE: %w", err)
	}
	for k, v := range c.headers {
		req.Header[k] = v
	}
	req.Header.Set(mcp.HeaderSessionID, sid)
	resp, err := c.plain.Do(req)
	if err != nil {
		return fmt.Errorf("DELETE session: %w", err)
	}
	drain(resp.Body)
	resp.Body.Close()
	return nil
}

// readLimited reads a body of at most limit bytes. A body of known length
// is read into one buffer of that size; one of unknown length into blocks
// joined once at the end: growing one buffer by appending would allocate
// several times the body on the way to a large one.
func readLimited(r io.Reader, size, limit int64) ([]byte, error) {
	if size > limit {
		return nil, fmt.Errorf("response larger than max_response_bytes (%d)", limit)
	}
	if size >= 0 {
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("read response: %w", err)
		}
		return b, nil
	}
	var blocks [][]byte
	total, next := int64(0), 16<<10
	for {
		block := make([]byte, next)
		next = min(next*2, maxReadBlock)
		n, err := io.ReadFull(r, block)
		blocks, total = append(blocks, block[:n]), total+int64(n)
		if total > limit {
			return nil, fmt.Errorf("response larger than max_response_bytes (%d)", limit)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read response: %w", err)
		}
	}
	b := make([]byte, 0, total) // exact: the body may live on in a cache entry
	for _, block := range blocks {
		b = append(b, block...)
	}
	return b, nil
}

// maxReadBlock is the largest block a body of unknown length is read in.
const maxReadBlock = 1 << 20

func statusError(resp *http.Response, limit int64) error {
	if loc, err := resp.Location(); resp.StatusCode/100 == 3 && err == nil {
		// Where, not how: a query may hold what was meant for the server.
		loc.User, loc.RawQuery, loc.Fragment = nil, "", ""
		return &StatusError{Status: resp.StatusCode, Body: "redirected to " + snippet([]byte(loc.String())) + " (a call is sent again on 307 and 308 only)"}
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, min(limit, 512)))
	return &StatusError{Status: resp.StatusCode, Body: snippet(b)}
}

func snippet(b []byte) string {
	const max = 200
	if len(b) > max {
		b = b[:max]
	}
	return string(bytes.TrimSpace(b))
}

// drain reads what is left of a small body so the connection can be reused.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<10)) }

// Listen holds a subscriptions/listen stream open.
func (c *httpConn) Listen(ctx context.Context, ex *Exchange, deliver func(*jsonrpc.Message)) error {
	resp, err := c.request(ctx, ex)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	ct := mcp.MediaType(resp.Header.Get("Content-Type"))
	if ct != "text/event-stream" || resp.StatusCode != http.StatusOK {
		if ct == "application/json" {
			if m, err := c.readJSON(resp, ex); err == nil && m.Error != nil {
				return m.Error
			}
		}
		return statusError(resp, c.limit)
	}
	return c.events(ctx, resp.Body, func(m *jsonrpc.Message) error {
		if m.IsResponse() && bytes.Equal(m.ID, ex.Msg.ID) {
			return ErrGracefulClose
		}
		if m.IsNotification() {
			deliver(m)
		} else {
			c.serverMessage(ctx, ex, m)
		}
		return nil
	})
}

// Stream holds the GET stream of a legacy session.
func (c *httpConn) Stream(ctx context.Context, s *Exchange, opened func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	for k, v := range c.headers {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	if s.Session != "" {
		req.Header.Set(mcp.HeaderSessionID, s.Session)
	}
	if mcp.HasVersionHeader(s.Version) {
		req.Header.Set(mcp.HeaderProtocolVersion, s.Version)
	}
	resp, err := c.plain.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound && s.Session != "":
		return ErrSessionGone
	case resp.StatusCode == http.StatusMethodNotAllowed:
		return ErrNoStream
	case resp.StatusCode != http.StatusOK:
		return statusError(resp, c.limit)
	}
	opened()
	ex := &Exchange{Version: s.Version, Session: s.Session} // a copy: the caller keeps s
	return c.events(ctx, resp.Body, func(m *jsonrpc.Message) error {
		c.serverMessage(ctx, ex, m)
		return nil
	})
}

// events reads SSE messages until the stream ends, f fails, or ctx ends.
func (c *httpConn) events(ctx context.Context, body io.Reader, f func(*jsonrpc.Message) error) error {
	r := sse.NewReader(body, int(c.limit))
	for {
		ev, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read stream: %w", err)
		}
		m, rpcErr := jsonrpc.Decode(ev.Data)
		if rpcErr != nil {
			continue // one bad event does not end a subscription
		}
		if err := f(m); err != nil {
			return err
		}
	}
}
