package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/sse"
	"github.com/manifold-mcp/manifold/router/session"
)

// SSE serves the HTTP+SSE transport of revision 2024-11-05 to the hosts
// that still speak it: GET /sse opens a session and its stream, whose first
// event, `endpoint`, names the URL of the session's POSTs
// (/messages?sessionId=ID, same origin). A POST is answered 202 Accepted;
// its answer, and the progress, log messages and questions on the way to
// it, go on the stream, as do the session's subscriptions. The session
// lives as long as its stream: when the stream ends the session is deleted,
// and whatever it still had running is cancelled.
//
// Everything else is Legacy's, as for the sessions of Streamable HTTP: the
// session is in the same store (in Redis, any replica takes the POSTs), the
// requests are the same Legacy.Serve, bound to the principal that opened
// the session. A POST reaching a replica that does not hold the stream
// sends its messages to the one that does through the store
// (session.ToCaller). A stream's queue is bounded: a client that does not
// read is ended, not buffered.
type SSE struct {
	legacy *Legacy
	log    *slog.Logger

	mu      sync.Mutex
	running map[string]int // requests in flight here, by session
}

// The paths of the HTTP+SSE transport, beside /mcp.
const (
	SSEStreamPath   = "/sse"
	SSEMessagesPath = "/messages"
)

// sseNegotiable are the revisions a caller of the HTTP+SSE transport may
// speak: those of Streamable HTTP, and 2024-11-05, whose transport it is.
// A caller asking for another gets 2024-11-05.
var sseNegotiable = append(append([]string(nil), Negotiable...), mcp.Version20241105)

// maxRunning bounds the requests of one session in flight on one replica:
// a POST returns at once, so nothing else would.
const maxRunning = 64

// NewSSE returns the HTTP+SSE transport of legacy.
func NewSSE(legacy *Legacy) *SSE {
	return &SSE{legacy: legacy, log: legacy.d.o.Logger, running: map[string]int{}}
}

// Stream is the handler of GET /sse.
func (f *SSE) Stream() http.Handler { return http.HandlerFunc(f.stream) }

// Messages is the handler of POST /messages.
func (f *SSE) Messages() http.Handler { return http.HandlerFunc(f.messages) }

func (f *SSE) stream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "method %s not allowed: GET %s opens a stream of the 2024-11-05 HTTP+SSE transport; %s", r.Method, SSEStreamPath, transports), http.StatusMethodNotAllowed)
		return
	}
	if _, wantSSE := accepts(r.Header.Values("Accept")); !wantSSE {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "Accept must include text/event-stream"), http.StatusNotAcceptable)
		return
	}
	ctx := r.Context()
	s := f.legacy.newSession(ctx)
	if rpcErr, status := f.legacy.open(ctx, s); rpcErr != nil {
		writeError(w, nil, rpcErr, status)
		return
	}
	defer f.end(ctx, s.ID)
	out := newOutbound()
	defer f.legacy.streams.hold(s.ID, out)()
	stream := sse.NewWriter(w)
	w.WriteHeader(http.StatusOK)
	// The endpoint's own messages path: PATH/messages for a curated one.
	if stream.Named("endpoint", []byte(endpointOf(ctx)+SSEMessagesPath+"?sessionId="+s.ID)) != nil {
		return
	}
	f.pump(ctx, s.ID, stream, http.NewResponseController(w), out)
}

// pump writes what is queued for the stream of session id, and the
// session's notifications, until the client leaves, falls behind, or the
// session ends.
func (f *SSE) pump(ctx context.Context, id string, stream *sse.Writer, rc *http.ResponseController, out *outbound) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	notified := make(chan error, 1)
	go func() {
		// The keep-alive tick also keeps the session from expiring while
		// its stream is open.
		notified <- f.legacy.Notifications(ctx, id, out.put, func() error { return out.put(nil) })
	}()
	go func() {
		select {
		case <-out.overflow:
			// A write blocked on the client fails now, not at its deadline.
			_ = rc.SetWriteDeadline(time.Now())
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-out.ready:
			for _, m := range out.takeAll() {
				if out.overflowed() {
					break
				}
				err := stream.Comment("keep-alive")
				if m != nil {
					err = stream.Event(m)
				}
				if err != nil {
					return
				}
			}
		case <-out.overflow:
			f.log.Warn("HTTP+SSE client too slow to read its stream; ending it and its session", "session", digest(id))
			return
		case err := <-notified:
			if err != nil && !errors.Is(err, session.ErrUnknown) {
				f.log.Debug("HTTP+SSE stream ended", "err", err)
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// end deletes the session of a stream that ended, which cancels what it
// had running on every replica.
func (f *SSE) end(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := f.legacy.End(ctx, id); err != nil && !errors.Is(err, session.ErrUnknown) {
		f.log.Warn("ending an HTTP+SSE session", "err", err)
	}
}

func (f *SSE) messages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "method %s not allowed: %s takes the POSTs of an HTTP+SSE session; %s", r.Method, SSEMessagesPath, transports), http.StatusMethodNotAllowed)
		return
	}
	id := r.URL.Query().Get("sessionId")
	if id == "" {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the sessionId query parameter is required: it is in the endpoint event of GET %s", SSEStreamPath), http.StatusBadRequest)
		return
	}
	if ct := r.Header.Get("Content-Type"); mcp.MediaType(ct) != "application/json" {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "Content-Type must be application/json"), http.StatusUnsupportedMediaType)
		return
	}
	s, err := f.legacy.Session(r.Context(), id)
	switch {
	case errors.Is(err, session.ErrUnknown):
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "session not found: open a stream again (GET %s)", SSEStreamPath), http.StatusNotFound)
		return
	case err != nil:
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "session store unavailable"), http.StatusServiceUnavailable)
		return
	}
	if v := r.Header.Get(mcp.HeaderProtocolVersion); v != "" && s.Version != "" && v != s.Version {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "MCP-Protocol-Version %q is not the session's (%s)", v, s.Version), http.StatusBadRequest)
		return
	}
	msg, ok := readMessage(w, r)
	if !ok {
		return
	}
	f.message(w, r, s, msg)
}

// message takes one message of session s: answered on the stream, the POST
// itself 202 Accepted.
func (f *SSE) message(w http.ResponseWriter, r *http.Request, s *session.Session, msg *jsonrpc.Message) {
	ctx := r.Context()
	switch {
	case !msg.IsRequest():
		f.legacy.Message(ctx, s, msg)
	case msg.Method == mcp.MethodInitialize:
		// In line: the caller's next request may only follow the answer.
		res, rpcErr := f.legacy.initializeStream(ctx, s, msg)
		f.answer(ctx, s.ID, msg.ID, res, rpcErr)
	case s.Version == "" && msg.Method != mcp.MethodPing:
		f.answer(ctx, s.ID, msg.ID, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the session is not initialized: send initialize first"))
	default:
		if !f.start(s.ID) {
			writeError(w, msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "this session has %d requests in flight, the most it may", maxRunning), http.StatusTooManyRequests)
			return
		}
		// The POST ends now; the request goes on until it is answered, is
		// cancelled, or its session ends.
		go f.serve(context.WithoutCancel(ctx), s, msg, r.Header.Clone())
	}
	w.WriteHeader(http.StatusAccepted)
}

func (f *SSE) answer(ctx context.Context, id string, reqID, res json.RawMessage, rpcErr *jsonrpc.Error) {
	w := &streamWriter{l: f.legacy, ctx: ctx, id: id}
	if rpcErr != nil {
		w.Error(reqID, rpcErr)
		return
	}
	w.Result(reqID, res)
}

// start counts a request of session id in, unless it has too many.
func (f *SSE) start(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[id] >= maxRunning {
		return false
	}
	f.running[id]++
	return true
}

func (f *SSE) done(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[id]--; f.running[id] <= 0 {
		delete(f.running, id)
	}
}

// serve runs one request of session s, cancelled when the session ends
// (its stream closed, wherever it was held).
func (f *SSE) serve(ctx context.Context, s *session.Session, msg *jsonrpc.Message, header http.Header) {
	defer f.done(s.ID)
	defer func() {
		// No Recover link stands above this goroutine.
		if p := recover(); p != nil {
			f.log.Error("panic serving an HTTP+SSE request", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, stopWatch := f.legacy.store.Watch(s.ID)
	defer stopWatch()
	go func() {
		for {
			select {
			case ev := <-events:
				if ev.Ended {
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	f.legacy.Serve(ctx, s, msg, header, &streamWriter{l: f.legacy, ctx: ctx, id: s.ID})
}

// initializeStream initializes session s of the HTTP+SSE transport, which
// its stream opened.
func (l *Legacy) initializeStream(ctx context.Context, s *session.Session, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	if s.Version != "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the session is initialized already")
	}
	h, rpcErr := parseHello(msg, sseNegotiable, mcp.Version20241105)
	if rpcErr != nil {
		return nil, rpcErr
	}
	h.into(s)
	if err := l.store.Update(ctx, s); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "session: %v", err)
	}
	return l.helloResult(ctx, s.Version), nil
}

// transports names what a host can use, for the answers that refuse a
// method or a path.
var transports = fmt.Sprintf("a host speaks Streamable HTTP on POST /mcp (2026-07-28; or initialize for a 2025-11-25, 2025-06-18 or 2025-03-26 session, then GET and DELETE /mcp with its Mcp-Session-Id), or the 2024-11-05 HTTP+SSE transport: GET %s, then POST %s?sessionId=ID", SSEStreamPath, SSEMessagesPath)

// streamWriter is the Writer of a request of the HTTP+SSE transport:
// everything goes on the session's stream, wherever it is held.
type streamWriter struct {
	l   *Legacy
	ctx context.Context
	id  string // the session's
}

func (w *streamWriter) Notify(msg []byte) error { return w.l.toCaller(w.ctx, w.id, msg) }

func (w *streamWriter) Result(id, result json.RawMessage) {
	_ = w.l.toCaller(w.ctx, w.id, jsonrpc.AppendResult(nil, id, result))
}

func (w *streamWriter) Error(id json.RawMessage, e *jsonrpc.Error) {
	_ = w.l.toCaller(w.ctx, w.id, jsonrpc.AppendError(nil, id, e))
}
