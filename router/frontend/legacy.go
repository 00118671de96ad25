package frontend

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router"
	"github.com/manifold-mcp/manifold/router/hub"
	"github.com/manifold-mcp/manifold/router/session"
)

// Legacy serves the callers of the session-based revisions (2025-11-25,
// 2025-06-18, 2025-03-26, and 2024-11-05 on its HTTP+SSE transport),
// whatever carries them. A legacy request is
// translated into the modern request the router serves: the session's
// negotiated capabilities, client info and log level become its `_meta`.
// The answer is translated back into the caller's revision: no member that
// exists only in 2026-07-28, and -32002 for a resource that does not exist.
// When the router answers input_required (a modern upstream needs input),
// the questions are put to the caller as requests on its session, and the
// request is retried with the answers, round after round. Session methods
// (ping, logging/setLevel, resources/subscribe) are answered here, and a
// session's subscriptions are delivered by Notifications.
//
// One file per job: the dispatch of a session's messages here; opening and
// finding sessions in legacy_session.go; the questions put to the caller
// in legacy_ask.go; the byte-level rewriting of results and errors into
// the caller's revision in legacy_result.go; notifications in
// legacy_notify.go.
type Legacy struct {
	d       *Dispatcher
	store   session.Store
	asks    askBook
	streams streamBook

	mu       sync.Mutex
	inflight map[string]context.CancelFunc // by session id and request id
}

// Negotiable are the revisions a legacy caller of Streamable HTTP (and
// stdio) may speak, newest first. 2024-11-05 came with the HTTP+SSE
// transport, and is negotiated on it only (sseNegotiable).
var Negotiable = []string{mcp.Version20251125, mcp.Version20250618, mcp.Version20250326}

// maxRounds bounds the input_required rounds of one legacy request.
const maxRounds = 16

// askTimeout bounds how long a question waits for the caller's answer.
const askTimeout = 5 * time.Minute

// NewLegacy returns the legacy front of d, keeping sessions in store.
func NewLegacy(d *Dispatcher, store session.Store) *Legacy {
	l := &Legacy{d: d, store: store, inflight: map[string]context.CancelFunc{}}
	store.Receive(l.receive)
	return l
}

// receive takes what another replica (or this one) sent to session id:
// what the caller sent for an exchange served here, or what the caller is
// to get on a stream held here. Anything else is another replica's.
func (l *Legacy) receive(id string, dir session.Direction, raw []byte) {
	switch dir {
	case session.ToCaller:
		l.streams.deliver(id, raw)
	case session.FromCaller:
		msg, rpcErr := jsonrpc.Decode(raw)
		if rpcErr != nil {
			return
		}
		if msg.IsResponse() {
			l.asks.answer(id, msg)
		} else {
			l.cancelHere(id, msg)
		}
	}
}

// Message takes a message of session s that is not a request: the caller's
// answer to a question, or a notification.
func (l *Legacy) Message(ctx context.Context, s *session.Session, msg *jsonrpc.Message) {
	var here bool
	switch {
	case msg.IsResponse():
		here = l.asks.answer(s.ID, msg)
	case msg.Method == mcp.NotifyCancelled:
		here = l.cancelHere(s.ID, msg)
	default:
		return
	}
	if !here {
		// Served by another replica, perhaps.
		if raw, err := json.Marshal(msg); err == nil {
			_ = l.store.Send(ctx, s.ID, session.FromCaller, raw)
		}
	}
}

// cancelHere cancels the request of session id that notifications/cancelled
// msg names, if it is served here.
func (l *Legacy) cancelHere(id string, msg *jsonrpc.Message) bool {
	if msg.Method != mcp.NotifyCancelled {
		return false
	}
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(msg.Params, &p) != nil {
		return false
	}
	l.mu.Lock()
	cancel := l.inflight[id+"\x00"+string(p.RequestID)]
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return cancel != nil
}

// toCaller sends msg to the caller of session id on its stream, here or on
// the replica that holds it.
func (l *Legacy) toCaller(ctx context.Context, id string, msg []byte) error {
	if held, err := l.streams.take(id, msg); held {
		return err
	}
	return l.store.Send(ctx, id, session.ToCaller, msg)
}

// Serve answers request msg of session s over w. header is the request's
// transport header (nil on stdio): upstreams are forwarded the headers they
// are configured to receive from it, and its credentials key the caller's
// private cache entries, as for any modern request.
func (l *Legacy) Serve(ctx context.Context, s *session.Session, msg *jsonrpc.Message, header http.Header, w Writer) {
	ctx, cancel := context.WithCancel(router.WithSession(ctx, s.ID, s.Version))
	key := s.ID + "\x00" + string(msg.ID)
	l.mu.Lock()
	l.inflight[key] = cancel
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.inflight, key)
		l.mu.Unlock()
		cancel()
	}()
	res, err := l.serve(ctx, s, msg, header, w)
	if err != nil {
		w.Error(msg.ID, legacyError(msg.Method, err))
		return
	}
	w.Result(msg.ID, res)
}

func (l *Legacy) serve(ctx context.Context, s *session.Session, msg *jsonrpc.Message, header http.Header, w Writer) (json.RawMessage, *jsonrpc.Error) {
	switch msg.Method {
	case mcp.MethodPing, mcp.MethodSetLevel, mcp.MethodSubscribe, mcp.MethodUnsubscribe:
		return l.sessionMethod(ctx, s, msg, header)
	case mcp.MethodInitialize:
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the session is initialized already")
	case mcp.MethodDiscover, mcp.MethodSubscriptions:
		return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method %q does not exist in protocol version %s", msg.Method, s.Version)
	}
	req, rpcErr := modernRequest(s, msg)
	if rpcErr != nil {
		return nil, rpcErr
	}
	req.Header = header
	return l.call(ctx, s, req, w)
}

// sessionMethod answers a method of the session itself (ping,
// logging/setLevel, resources/subscribe and unsubscribe), inside the
// dispatcher's links as any request.
func (l *Legacy) sessionMethod(ctx context.Context, s *session.Session, msg *jsonrpc.Message, header http.Header) (json.RawMessage, *jsonrpc.Error) {
	// Only for the links to read (the caller's trace context, the URI):
	// each method decodes its own params.
	params, _ := msg.ParamsObject()
	meta, _ := params.Object("_meta")
	req := &mcp.Request{Method: msg.Method, Params: params, Meta: meta, Header: header}
	res, err := l.d.local(ctx, req, func(ctx context.Context, _ *mcp.Request) (json.RawMessage, error) {
		var res json.RawMessage
		var rpcErr *jsonrpc.Error
		switch msg.Method {
		case mcp.MethodPing:
			res = json.RawMessage(`{}`)
		case mcp.MethodSetLevel:
			res, rpcErr = l.setLevel(ctx, s, msg)
		default:
			res, rpcErr = l.subscribe(ctx, s, msg)
		}
		if rpcErr != nil {
			return nil, rpcErr
		}
		return res, nil
	})
	if err != nil {
		return nil, l.d.answerable(msg.Method, err)
	}
	return res, nil
}

func (l *Legacy) setLevel(ctx context.Context, s *session.Session, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	var p struct {
		Level string `json:"level"`
	}
	if json.Unmarshal(msg.Params, &p) != nil || !slices.Contains(mcp.LogLevels, p.Level) {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.level must be one of %s", strings.Join(mcp.LogLevels, ", "))
	}
	s.LogLevel = p.Level
	if err := l.store.Update(ctx, s); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "session: %v", err)
	}
	return json.RawMessage(`{}`), nil
}

func (l *Legacy) subscribe(ctx context.Context, s *session.Session, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	var p struct {
		URI string `json:"uri"`
	}
	if json.Unmarshal(msg.Params, &p) != nil || p.URI == "" || len(p.URI) > hub.MaxURILen {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.uri must be a string of at most %d bytes", hub.MaxURILen)
	}
	i := slices.Index(s.Subscriptions, p.URI)
	switch {
	case msg.Method == mcp.MethodUnsubscribe && i >= 0:
		s.Subscriptions = slices.Delete(s.Subscriptions, i, i+1)
	case msg.Method == mcp.MethodSubscribe && i < 0:
		// The session's stream subscribes to them all at once: the bound
		// of one listen is the session's.
		if limit := l.d.o.Hub.MaxURIs(); limit > 0 && len(s.Subscriptions) >= limit {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "a session may subscribe to at most %d resources (subscriptions.max_uris_per_stream)", limit)
		}
		s.Subscriptions = append(s.Subscriptions, p.URI)
	default:
		return json.RawMessage(`{}`), nil
	}
	if err := l.store.Update(ctx, s); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "session: %v", err)
	}
	return json.RawMessage(`{}`), nil
}

// modernRequest translates a legacy request into the modern one the router
// serves: the session supplies the `_meta` members a modern caller sends.
func modernRequest(s *session.Session, msg *jsonrpc.Message) (*mcp.Request, *jsonrpc.Error) {
	params, meta, rpcErr := msg.RequestParams()
	if rpcErr != nil {
		return nil, rpcErr
	}
	for k := range meta {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			delete(meta, k)
		}
	}
	meta[mcp.MetaProtocolVersion] = jsonrpc.Quote(mcp.Version)
	meta[mcp.MetaClientCapabilities] = orEmpty(s.ClientCapabilities)
	if len(s.ClientInfo) > 0 {
		meta[mcp.MetaClientInfo] = s.ClientInfo
	}
	if s.LogLevel != "" {
		meta[mcp.MetaLogLevel] = jsonrpc.Quote(s.LogLevel)
	}
	return &mcp.Request{Method: msg.Method, Params: params, Meta: meta, Raw: msg.Params, CallerVersion: s.Version}, nil
}

func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || raw[0] != '{' {
		return json.RawMessage(`{}`)
	}
	return raw
}
