// Package endpoint is Manifold's downstream face: one MCP 2026-07-28
// endpoint over stateless Streamable HTTP.
//
// Every rule about what may reach the router lives here, checked once and in
// the order the specification implies: the Host and Origin of the request (DNS
// rebinding), the HTTP method, media types and size, the JSON-RPC envelope,
// the required `_meta` members, the headers that must mirror the body, and the
// protocol version. A request that passes is handed to the Handler as an
// *mcp.Request; one that fails gets the JSON-RPC error and HTTP status the
// specification names, with the request's id. Nothing a client sends can make
// the endpoint panic or wait forever: bodies are bounded, handler panics are
// recovered, and the request's context carries the client's disconnect to the
// upstream call.
package endpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/manifold-mcp/manifold/jsonrpc"
	"github.com/manifold-mcp/manifold/mcp"
	"github.com/manifold-mcp/manifold/sse"
)

// Handler answers a validated request. A *jsonrpc.Error is an answer for the
// caller; any other error is reported as an internal error and logged.
type Handler interface {
	Handle(ctx context.Context, req *mcp.Request) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *mcp.Request) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
	return f(ctx, req)
}

// Streamer serves a request whose answer is a long-lived stream
// (subscriptions/listen). It owns w until it returns; it returns an error
// only when it wrote nothing, and the endpoint then answers with it.
type Streamer interface {
	Stream(w http.ResponseWriter, r *http.Request, req *mcp.Request, id json.RawMessage) error
}

// Options configure an Endpoint.
type Options struct {
	Handler Handler
	// Streams, if set, serves subscriptions/listen; without it the method
	// is unknown.
	Streams Streamer
	// AllowedHosts and AllowedOrigins extend the loopback defaults. An entry
	// without a port matches any port; "*" matches everything.
	AllowedHosts   []string
	AllowedOrigins []string
	MaxBodyBytes   int64
	// BearerTokens, if any, are the only credentials admitted: a request
	// without one of them is refused before anything else looks at it.
	BearerTokens []string
	Logger       *slog.Logger
}

// Endpoint is an http.Handler for POST /mcp.
type Endpoint struct {
	o      Options
	tokens [][32]byte // digests of the accepted bearer tokens
}

// New returns an Endpoint.
func New(o Options) *Endpoint {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	e := &Endpoint{o: o}
	for _, t := range o.BearerTokens {
		e.tokens = append(e.tokens, sha256.Sum256([]byte(t)))
	}
	return e
}

// authenticated checks the bearer token in constant time. Comparing
// digests keeps the token's length out of the timing too.
func (e *Endpoint) authenticated(r *http.Request) bool {
	if len(e.tokens) == 0 {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for _, want := range e.tokens {
		match |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	return match == 1
}

func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			e.o.Logger.Error("panic serving request", "panic", p, "stack", string(debug.Stack()))
			writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "internal error"), http.StatusInternalServerError)
		}
	}()
	if !e.hostAllowed(r.Host) {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "forbidden: Host %q is not allowed", r.Host), http.StatusForbidden)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !e.originAllowed(o) {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "forbidden: Origin %q is not allowed", o), http.StatusForbidden)
		return
	}
	if !e.authenticated(r) {
		// Before the body is read and long before any cache is consulted:
		// a caller who is not admitted learns nothing, public entries
		// included.
		w.Header().Set("WWW-Authenticate", `Bearer realm="manifold"`)
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "unauthorized: a valid bearer token is required"), http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "method %s not allowed: this endpoint is stateless and accepts POST only", r.Method), http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && mediaType(ct) != "application/json" {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "Content-Type must be application/json"), http.StatusUnsupportedMediaType)
		return
	}
	wantJSON, wantSSE := accepts(r.Header.Values("Accept"))
	if !wantJSON && !wantSSE {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "Accept must include application/json or text/event-stream"), http.StatusNotAcceptable)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, e.o.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "request body larger than %d bytes", e.o.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeParseError, "reading body: %v", err), http.StatusBadRequest)
		return
	}
	msg, rpcErr := jsonrpc.Decode(body)
	if rpcErr != nil {
		var id json.RawMessage
		if msg != nil {
			id = msg.ID
		}
		writeError(w, id, rpcErr, http.StatusBadRequest)
		return
	}
	if !msg.IsRequest() {
		// Notifications and responses: nothing to answer in a stateless
		// endpoint (a client closes a stream to cancel its request).
		w.WriteHeader(http.StatusAccepted)
		return
	}
	req, rpcErr := e.validate(r, msg)
	if rpcErr != nil {
		writeError(w, msg.ID, rpcErr, status(rpcErr.Code))
		return
	}
	if req.Method == mcp.MethodSubscriptions && e.o.Streams != nil {
		if !wantSSE {
			writeError(w, msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "subscriptions/listen answers with an event stream: Accept must include text/event-stream"), http.StatusNotAcceptable)
			return
		}
		if err := e.o.Streams.Stream(w, r, req, msg.ID); err != nil {
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) {
				rpcErr = jsonrpc.Errorf(jsonrpc.CodeInternalError, "internal error")
			}
			writeError(w, msg.ID, rpcErr, status(rpcErr.Code))
		}
		return
	}
	e.serve(w, r, req, msg.ID, wantSSE)
}

// validate checks the request's `_meta` and mirrored headers, in the order
// the specification's examples and the conformance suite agree on: required
// `_meta` members (-32602), then the version header against `_meta`
// (-32020: a mismatch beats an unsupported version), then the version itself
// (-32022), then the Mcp-Method and Mcp-Name headers (-32020).
func (e *Endpoint) validate(r *http.Request, msg *jsonrpc.Message) (*mcp.Request, *jsonrpc.Error) {
	params, err := msg.ParamsObject()
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params must be an object")
	}
	meta, err := params.Object("_meta")
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params._meta must be an object")
	}
	delete(params, "_meta")
	version, ok := meta.Str(mcp.MetaProtocolVersion)
	if !ok || version == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params._meta[%q] is required and must be a string", mcp.MetaProtocolVersion)
	}
	if caps := meta[mcp.MetaClientCapabilities]; len(caps) == 0 || caps[0] != '{' {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params._meta[%q] is required and must be an object", mcp.MetaClientCapabilities)
	}
	if rpcErr := mirrored(r.Header, mcp.HeaderProtocolVersion, version); rpcErr != nil {
		return nil, rpcErr
	}
	if version != mcp.Version {
		return nil, jsonrpc.Errorf(jsonrpc.CodeUnsupportedVersion, "unsupported protocol version %q", version).
			WithData(map[string]any{"supported": []string{mcp.Version}, "requested": version})
	}
	if rpcErr := mirrored(r.Header, mcp.HeaderMethod, msg.Method); rpcErr != nil {
		return nil, rpcErr
	}
	if p := mcp.NameParam(msg.Method); p != "" {
		name, ok := params.Str(p)
		if _, present := params[p]; present && !ok {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.%s must be a string", p)
		}
		if rpcErr := mirrored(r.Header, mcp.HeaderName, name); rpcErr != nil {
			return nil, rpcErr
		}
	}
	return &mcp.Request{Method: msg.Method, Params: params, Meta: meta, Header: r.Header}, nil
}

// mirrored checks that header name is present and, decoded, equals want.
func mirrored(h http.Header, name, want string) *jsonrpc.Error {
	raw := h.Values(name)
	if len(raw) != 1 {
		return jsonrpc.Errorf(jsonrpc.CodeHeaderMismatch, "header %s is required exactly once", name)
	}
	got, err := mcp.DecodeHeader(raw[0])
	if err != nil {
		return jsonrpc.Errorf(jsonrpc.CodeHeaderMismatch, "header %s: %v", name, err)
	}
	if got != want {
		return jsonrpc.Errorf(jsonrpc.CodeHeaderMismatch, "header %s does not match the request body", name)
	}
	return nil
}

// serve runs the handler and writes its answer: JSON, or SSE once the
// upstream sends a request-scoped notification the client may see.
func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request, req *mcp.Request, id json.RawMessage, sseOK bool) {
	out := &responder{w: w, sseOK: sseOK}
	_, wantProgress := req.Meta[mcp.MetaProgressToken]
	_, wantLogs := req.Meta[mcp.MetaLogLevel]
	req.Notify = func(n *jsonrpc.Message) {
		if n.Method == mcp.NotifyProgress && wantProgress || n.Method == mcp.NotifyMessage && wantLogs {
			out.notify(n)
		}
	}
	res, err := e.o.Handler.Handle(r.Context(), req)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) {
			e.o.Logger.Error("handler failed", "method", req.Method, "err", err)
			rpcErr = jsonrpc.Errorf(jsonrpc.CodeInternalError, "internal error")
		}
		out.finish(status(rpcErr.Code), jsonrpc.AppendError(nil, id, rpcErr))
		return
	}
	// The result is written in place, not copied into one buffer: for a
	// cache hit this copy would be most of the work left.
	out.finish(http.StatusOK, resultPrefix, id, resultInfix, res, resultSuffix)
}

var (
	resultPrefix = []byte(`{"jsonrpc":"2.0","id":`)
	resultInfix  = []byte(`,"result":`)
	resultSuffix = []byte(`}`)
)

// responder writes one response, switching to SSE when a notification must
// go out before it. Notifications are queued, never written by the goroutine
// that delivers them: that goroutine may be an upstream's only reader (stdio),
// which a client that stops reading must not block. A full queue drops.
type responder struct {
	w     http.ResponseWriter
	sseOK bool

	mu     sync.Mutex
	done   bool
	queue  chan []byte // nil until the first notification
	stream *sse.Writer
	wrote  chan struct{} // closed when the queue is drained
}

const notifyQueue = 32

func (o *responder) notify(n *jsonrpc.Message) {
	b, err := json.Marshal(n)
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done || !o.sseOK {
		return
	}
	if o.queue == nil {
		o.stream = sse.NewWriter(o.w)
		o.w.WriteHeader(http.StatusOK)
		o.queue, o.wrote = make(chan []byte, notifyQueue), make(chan struct{})
		go func() {
			defer close(o.wrote)
			for b := range o.queue {
				_ = o.stream.Event(b)
			}
		}()
	}
	select {
	case o.queue <- b:
	default:
	}
}

// finish writes the response, the concatenation of parts.
func (o *responder) finish(code int, parts ...[]byte) {
	o.mu.Lock()
	o.done = true
	queue := o.queue
	o.mu.Unlock()
	if queue != nil {
		close(queue)
		<-o.wrote
		_ = o.stream.Event(bytes.Join(parts, nil))
		return
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h := o.w.Header()
	h["Content-Type"] = []string{"application/json"} // canonical keys: no need for Set
	h["Content-Length"] = []string{strconv.Itoa(n)}
	o.w.WriteHeader(code)
	for _, p := range parts {
		_, _ = o.w.Write(p)
	}
}

// status maps a JSON-RPC error to the HTTP status 2026-07-28 gives it.
func status(code int64) int {
	switch code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeInvalidParams,
		jsonrpc.CodeHeaderMismatch, jsonrpc.CodeMissingCapability, jsonrpc.CodeUnsupportedVersion:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

func writeError(w http.ResponseWriter, id json.RawMessage, e *jsonrpc.Error, code int) {
	body := jsonrpc.AppendError(nil, id, e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func mediaType(v string) string {
	mt, _, _ := mime.ParseMediaType(v)
	return mt
}

// accepts reports whether the Accept header admits JSON and SSE. A missing
// header admits both.
func accepts(values []string) (json, sse bool) {
	if len(values) == 0 {
		return true, true
	}
	if len(values) == 1 && values[0] == "application/json, text/event-stream" {
		return true, true // what every conforming client sends
	}
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			switch mt {
			case "application/json", "application/*":
				json = true
			case "text/event-stream", "text/*":
				sse = true
			case "*/*":
				json, sse = true, true
			}
		}
	}
	return json, sse
}

// hostAllowed implements DNS-rebinding protection: a browser tricked into
// sending a request to a loopback Manifold still sends the attacker's Host.
func (e *Endpoint) hostAllowed(hostport string) bool {
	host, port := splitHostPort(hostport)
	if isLoopback(host) {
		return true
	}
	for _, a := range e.o.AllowedHosts {
		if a == "*" {
			return true
		}
		ah, ap := splitHostPort(a)
		if strings.EqualFold(ah, host) && (ap == "" || ap == port) {
			return true
		}
	}
	return false
}

func (e *Endpoint) originAllowed(origin string) bool {
	for _, a := range e.o.AllowedOrigins {
		if a == "*" || strings.EqualFold(strings.TrimSuffix(a, "/"), origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return isLoopback(u.Hostname())
}

func splitHostPort(hp string) (host, port string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return strings.Trim(h, "[]"), p
	}
	return strings.Trim(hp, "[]"), ""
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
