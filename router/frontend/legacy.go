package frontend

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth"
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

// Initialize opens a session for an initialize request and returns it with
// the result to answer.
func (l *Legacy) Initialize(ctx context.Context, msg *jsonrpc.Message) (*session.Session, json.RawMessage, *jsonrpc.Error) {
	s, res, rpcErr, _ := l.initialize(ctx, msg)
	return s, res, rpcErr
}

// initialize is Initialize, with the HTTP status of a refusal, inside the
// dispatcher's links as any request.
func (l *Legacy) initialize(ctx context.Context, msg *jsonrpc.Message) (s *session.Session, res json.RawMessage, rpcErr *jsonrpc.Error, status int) {
	_, err := l.d.local(ctx, &mcp.Request{Method: mcp.MethodInitialize}, func(ctx context.Context, _ *mcp.Request) (json.RawMessage, error) {
		s, res, rpcErr, status = l.hello(ctx, msg)
		if rpcErr != nil {
			return nil, rpcErr
		}
		return res, nil
	})
	if err != nil && rpcErr == nil { // a panic, contained
		return nil, nil, l.d.answerable(mcp.MethodInitialize, err), http.StatusInternalServerError
	}
	return s, res, rpcErr, status
}

// hello opens the session an initialize asks for.
func (l *Legacy) hello(ctx context.Context, msg *jsonrpc.Message) (*session.Session, json.RawMessage, *jsonrpc.Error, int) {
	h, rpcErr := parseHello(msg, Negotiable, Negotiable[0])
	if rpcErr != nil {
		return nil, nil, rpcErr, http.StatusBadRequest
	}
	s := l.newSession(ctx)
	h.into(s)
	if rpcErr, status := l.open(ctx, s); rpcErr != nil {
		return nil, nil, rpcErr, status
	}
	return s, l.helloResult(ctx, s.Version), nil, 0
}

// hello is what a legacy initialize says.
type hello struct {
	version      string
	capabilities json.RawMessage
	info         json.RawMessage
}

// parseHello reads an initialize request. The version is the caller's if
// it is one of negotiable, else fallback (the caller decides whether it can
// speak it). What the session keeps of the client is bounded.
func parseHello(msg *jsonrpc.Message, negotiable []string, fallback string) (hello, *jsonrpc.Error) {
	var p struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ClientInfo      json.RawMessage `json:"clientInfo"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil || p.ProtocolVersion == "" {
		return hello{}, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "initialize needs params.protocolVersion")
	}
	for name, v := range map[string]json.RawMessage{"capabilities": p.Capabilities, "clientInfo": p.ClientInfo} {
		if len(v) > session.MaxClientBytes {
			return hello{}, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.%s is %d bytes, more than the %d a session keeps", name, len(v), session.MaxClientBytes)
		}
	}
	h := hello{version: p.ProtocolVersion, capabilities: p.Capabilities, info: p.ClientInfo}
	if !slices.Contains(negotiable, h.version) {
		h.version = fallback
	}
	return h, nil
}

func (h hello) into(s *session.Session) {
	s.Version, s.ClientCapabilities, s.ClientInfo = h.version, h.capabilities, h.info
}

// newSession is a session of the caller of ctx, not yet initialized.
func (l *Legacy) newSession(ctx context.Context) *session.Session {
	return &session.Session{ID: session.NewID(), Owner: ownerOf(ctx), Share: shareOf(ctx), Endpoint: endpointOf(ctx)}
}

// open stores a new session, or says why not and with which HTTP status:
// 429 past the caller's share (its own doing: it may end one of its
// sessions), 503 past the bound of all (try later), distinctly.
func (l *Legacy) open(ctx context.Context, s *session.Session) (*jsonrpc.Error, int) {
	err := l.store.Create(ctx, s)
	var full *session.FullError
	switch {
	case err == nil:
		return nil, 0
	case errors.As(err, &full) && full.Share:
		return jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "this principal has %d sessions open, its share (sessions.max_per_principal): end one (DELETE) or let one expire", full.Limit).
			WithData(map[string]any{"bound": "sessions.max_per_principal", "limit": full.Limit}), http.StatusTooManyRequests
	case errors.As(err, &full):
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "too many open sessions on this server (sessions.max: %d): try again later", full.Limit).
			WithData(map[string]any{"bound": "sessions.max", "limit": full.Limit}), http.StatusServiceUnavailable
	}
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot open a session: %v", err), http.StatusServiceUnavailable
}

// helloResult is the result of an initialize that opened a session of
// version.
func (l *Legacy) helloResult(ctx context.Context, version string) json.RawMessage {
	caps := l.d.o.Capabilities(ctx)
	caps.Logging = &struct{}{}
	res, _ := json.Marshal(map[string]any{"protocolVersion": version, "capabilities": caps, "serverInfo": mcp.ServerInfo})
	return res
}

// Session returns the session id names, or session.ErrUnknown: also when
// another principal than the one that opened it asks, so that a session id
// seen in a log is of no use to anyone else, and nothing says it exists;
// and when it is asked at another endpoint than the one it was opened on,
// whose view it would otherwise leave.
func (l *Legacy) Session(ctx context.Context, id string) (*session.Session, error) {
	s, err := l.store.Get(ctx, id)
	if err == nil && (s.Owner != ownerOf(ctx) || s.Endpoint != endpointOf(ctx)) {
		return nil, session.ErrUnknown
	}
	return s, err
}

// ownerOf names the caller a session belongs to: a digest of its
// principal, "" when callers are not authenticated.
func ownerOf(ctx context.Context) string {
	p := auth.From(ctx)
	if p == nil {
		return ""
	}
	return digest(p.ID)
}

// shareOf names whose share of the sessions the caller's count against:
// its principal's. Without authentication there is none, and only the
// bound of all applies: an address is no principal (every caller behind
// one proxy, every host on loopback, has the same), and a share keyed by it
// would cap them all together.
func shareOf(ctx context.Context) string { return ownerOf(ctx) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// End deletes a session.
func (l *Legacy) End(ctx context.Context, id string) error { return l.store.Delete(ctx, id) }

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

// call runs a translated request, putting the questions of each
// input_required answer to the caller until the answer is complete.
func (l *Legacy) call(ctx context.Context, s *session.Session, req *mcp.Request, w Writer) (json.RawMessage, *jsonrpc.Error) {
	for round := 0; ; round++ {
		res, rpcErr := l.d.handle(ctx, req, w)
		if rpcErr != nil {
			return nil, rpcErr
		}
		if rt, _ := jsonrpc.Member(res, "resultType"); !jsonrpc.IsString(rt, mcp.ResultTypeInputRequired) {
			return legacyResult(res), nil
		}
		obj, err := jsonrpc.ParseObject(res)
		if err != nil {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "an upstream answered input_required with a malformed result")
		}
		if round == maxRounds {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the request still needs input after %d rounds", maxRounds)
		}
		responses, rpcErr := l.askAll(ctx, s, obj, w)
		if rpcErr != nil {
			return nil, rpcErr
		}
		retry := *req
		retry.Params = req.Params.Clone()
		retry.Params["inputResponses"] = responses.Marshal()
		if state, ok := obj["requestState"]; ok {
			retry.Params["requestState"] = state
		} else {
			delete(retry.Params, "requestState")
		}
		req = &retry
	}
}

// askAll puts each input request of an input_required result to the
// caller as a request on its session, and collects the results by key.
func (l *Legacy) askAll(ctx context.Context, s *session.Session, res jsonrpc.Object, w Writer) (jsonrpc.Object, *jsonrpc.Error) {
	requests, err := res.Object("inputRequests")
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "an upstream answered input_required with malformed inputRequests")
	}
	var caps map[string]json.RawMessage
	_ = json.Unmarshal(s.ClientCapabilities, &caps)
	out := jsonrpc.Object{}
	for key, raw := range requests {
		var q struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(raw, &q); err != nil || mcp.Questions[q.Method] == "" {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "an upstream asked for input Manifold cannot ask a legacy client (%s)", q.Method)
		}
		if _, ok := caps[mcp.Questions[q.Method]]; !ok {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the request needs the %s capability, which the client did not declare", mcp.Questions[q.Method])
		}
		result, rpcErr := l.ask(ctx, s, q.Method, withElicitationID(q.Method, q.Params), w)
		if rpcErr != nil {
			return nil, rpcErr
		}
		out[key] = result
	}
	return out, nil
}

// ask sends one request to the caller and waits for its result.
func (l *Legacy) ask(ctx context.Context, s *session.Session, method string, params json.RawMessage, w Writer) (json.RawMessage, *jsonrpc.Error) {
	id, answer, done := l.asks.open(s.ID)
	defer done()
	msg, _ := json.Marshal(&jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: id, Method: method, Params: params})
	if err := w.Notify(msg); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot ask the client (%s): %v", method, err)
	}
	select {
	case m := <-answer:
		if m.Error != nil {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the client refused %s: %s", method, m.Error.Message)
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cancelled while waiting for the client's answer to %s", method)
	case <-time.After(askTimeout):
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the client did not answer %s within %v", method, askTimeout)
	}
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

// modernOnly are the result members of 2026-07-28 a legacy caller must not
// see.
var modernOnly = []string{"resultType", "ttlMs", "cacheScope", "inputRequests", "requestState"}

// legacyResult gives a result the shape of the legacy revisions: the
// members only 2026-07-28 has are cut out at byte level, the others kept
// as the upstream wrote them, in their order (a map's decode and encode
// was 1.8 µs of a legacy caller's read, scripts/profile-hop CALLER=legacy).
// Only a `_meta` holding the modern revision's keys is decoded, to take
// them out. FuzzLegacyResult holds it to the decode-and-encode it replaced.
func legacyResult(raw json.RawMessage) json.RawMessage {
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(raw, buf[:0])
	if err != nil {
		return raw
	}
	var out []byte
	for i, m := range members {
		v, keep, same := legacyMember(m)
		if out == nil && same {
			continue // unchanged so far: nothing written yet
		}
		if out == nil {
			out = make([]byte, 0, len(raw))
			out = append(out, '{')
			for _, before := range members[:i] {
				out = appendMember(out, before.Key, before.Value)
			}
		}
		if keep {
			out = appendMember(out, m.Key, v)
		}
	}
	if out == nil {
		return raw // as the upstream sent it (a legacy session's answer)
	}
	return append(out, '}')
}

// legacyMember is m's value in a legacy result, whether m stays, and
// whether it stays as it was.
func legacyMember(m jsonrpc.MemberRange) (v json.RawMessage, keep, same bool) {
	for _, k := range modernOnly {
		if jsonrpc.KeyIs(m.Key, k) {
			return nil, false, false
		}
	}
	if !jsonrpc.KeyIs(m.Key, "_meta") || !bytes.Contains(m.Value, []byte(`"io.modelcontextprotocol/`)) {
		return m.Value, true, true
	}
	meta, err := jsonrpc.ParseObject(m.Value)
	if err != nil {
		return m.Value, true, true
	}
	for k := range meta {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			delete(meta, k)
		}
	}
	if len(meta) == 0 {
		return nil, false, false
	}
	return meta.Marshal(), true, false
}

// appendMember appends the member k: v to the object being written in b
// (which holds its opening brace).
func appendMember(b, k, v []byte) []byte {
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, k...)
	b = append(b, ':')
	return append(b, v...)
}

// withElicitationID gives a URL-mode elicitation the elicitationId
// 2025-11-25 requires (2026-07-28 has none).
func withElicitationID(method string, params json.RawMessage) json.RawMessage {
	p, err := jsonrpc.ParseObject(params)
	if method != "elicitation/create" || err != nil || p.String("mode") != "url" || p["elicitationId"] != nil {
		return params
	}
	_ = p.Set("elicitationId", session.NewID())
	return p.Marshal()
}

// legacyError gives an error the legacy revisions' codes: a resource that
// does not exist is -32002; a URL the user must open, which the client
// cannot be asked to (-32021 naming it), is -32042, URL elicitation
// required.
func legacyError(method string, e *jsonrpc.Error) *jsonrpc.Error {
	if e.Code == jsonrpc.CodeMissingCapability {
		return urlElicitationRequired(e)
	}
	if method != mcp.MethodResourcesRead || e.Code != jsonrpc.CodeInvalidParams {
		return e
	}
	data, err := jsonrpc.ParseObject(e.Data)
	if err != nil || data.String("uri") == "" {
		return e
	}
	c := *e
	c.Code = jsonrpc.CodeLegacyResourceNotFound
	return &c
}

// urlElicitationRequired is the legacy form of a consent the client
// cannot be asked for: -32042 with the URL to open.
func urlElicitationRequired(e *jsonrpc.Error) *jsonrpc.Error {
	data, err := jsonrpc.ParseObject(e.Data)
	if err != nil || data.String("url") == "" {
		return e
	}
	c := jsonrpc.Errorf(jsonrpc.CodeURLElicitationRequired, "%s", e.Message)
	return c.WithData(map[string]any{"elicitations": []map[string]string{{
		"mode": "url", "elicitationId": session.NewID(), "url": data.String("url"), "message": data.String("message"),
	}}})
}

// Notifications delivers session id's subscriptions with send, as legacy
// (untagged) notifications, until ctx ends or the session does. It follows
// the session's subscription set as it changes, wherever it is changed, and
// calls keepAlive on quiet streams (which also keeps the session alive).
func (l *Legacy) Notifications(ctx context.Context, id string, send func([]byte) error, keepAlive func() error) error {
	events, stopWatch := l.store.Watch(id)
	defer stopWatch()
	tick := time.NewTicker(l.d.o.KeepAlive)
	defer tick.Stop()
	for {
		s, err := l.store.Get(ctx, id)
		if err != nil {
			return err
		}
		var sub *hub.Subscription
		if s.Version != "" { // nothing is told before initialize
			if sub, err = l.d.o.Hub.Subscribe(ctx, legacyFilter(s)); err != nil {
				return err
			}
		}
		again, err := l.deliver(ctx, id, sub, events, tick.C, send, keepAlive)
		if sub != nil {
			sub.Close()
		}
		if !again {
			return err
		}
	}
}

// deliver writes one hub subscription's events (none while sub is nil)
// until the session changes (again: subscribe anew) or the stream ends.
func (l *Legacy) deliver(ctx context.Context, id string, sub *hub.Subscription, events <-chan session.Event, tick <-chan time.Time, send func([]byte) error, keepAlive func() error) (again bool, err error) {
	var hubEvents <-chan hub.Event
	var hubEnded <-chan struct{}
	if sub != nil {
		hubEvents, hubEnded = sub.Events(), sub.Ended()
	}
	for {
		select {
		case ev := <-hubEvents:
			if err := send(legacyEvent(ev)); err != nil {
				return false, err
			}
		case ev := <-events:
			if ev.Ended {
				return false, session.ErrUnknown
			}
			return true, nil
		case <-tick:
			if _, err := l.store.Get(ctx, id); err != nil {
				return false, err
			}
			if err := keepAlive(); err != nil {
				return false, err
			}
		case <-hubEnded:
			return false, sub.Err()
		case <-ctx.Done():
			return false, nil
		}
	}
}

// legacyFilter is what a legacy session is told of: every list's changes,
// and its subscribed resources.
func legacyFilter(s *session.Session) mcp.SubscriptionFilter {
	f := mcp.SubscriptionFilter{ResourceSubscriptions: s.Subscriptions}
	for _, lc := range mcp.ListChanges {
		*lc.Wanted(&f) = true
	}
	return f
}

func legacyEvent(ev hub.Event) []byte {
	if ev.List != nil {
		b, _ := jsonrpc.Notification(ev.List.Notification, struct{}{})
		return b
	}
	b, _ := jsonrpc.Notification(mcp.NotifyResourceUpdated, map[string]string{"uri": ev.URI})
	return b
}

// askBook matches a legacy caller's answers to the questions Manifold put
// to it. A question's id carries a prefix drawn at random for this process:
// replicas share a session, an answer reaches whichever replica the caller
// posts it to, and one replica's question must never be answered with the
// answer to another's, asked in the same moment.
type askBook struct {
	mu      sync.Mutex
	prefix  string
	next    uint64
	waiting map[string]chan *jsonrpc.Message // by session id and request id
}

func (b *askBook) open(sessionID string) (json.RawMessage, <-chan *jsonrpc.Message, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting == nil {
		b.waiting = map[string]chan *jsonrpc.Message{}
		b.prefix = "manifold-" + rand.Text()[:12] + "-"
	}
	b.next++
	id := jsonrpc.Quote(b.prefix + strconv.FormatUint(b.next, 10))
	key := sessionID + "\x00" + string(id)
	ch := make(chan *jsonrpc.Message, 1)
	b.waiting[key] = ch
	return id, ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.waiting, key)
	}
}

// answer hands msg to the question it answers, if it waits here.
func (b *askBook) answer(sessionID string, msg *jsonrpc.Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.waiting[sessionID+"\x00"+string(msg.ID)]
	if ok {
		select {
		case ch <- msg:
		default:
		}
	}
	return ok
}
