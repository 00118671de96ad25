package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/ratelimit"
	"github.com/manifold-mcp/manifold/internal/sse"
)

// HTTP is the Streamable HTTP frontend on one path (POST /mcp): modern
// stateless requests, and, when it has a Legacy, the sessions of legacy
// callers on the same path (http_session.go). It checks what HTTP alone
// carries (method, media types, the body, the mirrored headers) and leaves
// the rest to the Dispatcher. Host and Origin checks, authentication and the
// body limit are links of the chain around it. Nothing a client sends can
// make it wait forever: the request's context carries the client's
// disconnect to the upstream call, and streams have write deadlines.
type HTTP struct {
	d      *Dispatcher
	legacy *Legacy // nil: modern callers only
	shapes *shapes
}

// NewHTTP returns the HTTP frontend of d; legacy, if not nil, serves legacy
// sessions beside modern requests.
func NewHTTP(d *Dispatcher, legacy *Legacy) *HTTP {
	return &HTTP{d: d, legacy: legacy, shapes: newShapes()}
}

func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sid := r.Header.Get(mcp.HeaderSessionID); sid != "" && h.legacy != nil {
		h.serveSession(w, r, sid)
		return
	}
	if r.Method != http.MethodPost {
		h.refuseMethod(w, r)
		return
	}
	wantSSE, ok := checkPost(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	key, idStart, idEnd, isShaped := h.shapeOf(r, body)
	if isShaped {
		if req := h.shapes.get(key); req != nil {
			h.d.Serve(r.Context(), body[idStart:idEnd:idEnd], serving(req, r.Header), &httpWriter{w: w, sseOK: wantSSE})
			return
		}
	}
	msg, ok := decodeMessage(w, body)
	if !ok {
		return
	}
	if h.legacy != nil && isLegacyInitialize(msg) {
		h.initialize(w, r, msg)
		return
	}
	if !msg.IsRequest() {
		// Notifications and responses: nothing to answer in a stateless
		// endpoint (a client closes a stream to cancel its request).
		w.WriteHeader(http.StatusAccepted)
		return
	}
	req, rpcErr := Validate(msg, headerMirror(r.Header))
	if rpcErr != nil {
		writeError(w, msg.ID, rpcErr, status(rpcErr.Code))
		return
	}
	stream := IsStream(req.Method)
	if stream && !wantSSE {
		writeError(w, msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s answers with an event stream: Accept must include text/event-stream", req.Method), http.StatusNotAcceptable)
		return
	}
	req.Header = r.Header
	if isShaped && !stream && bytes.Equal(msg.ID, body[idStart:idEnd]) {
		kept := shaped(req)
		h.d.Serve(r.Context(), msg.ID, req, &httpWriter{w: w, sseOK: wantSSE})
		h.shapes.keep(key, cap(body), kept) // what the stored slices hold
		return
	}
	h.d.Serve(r.Context(), msg.ID, req, &httpWriter{w: w, sseOK: wantSSE})
}

// refuseMethod answers a request of another method than POST that names
// no session: 405, saying what the endpoint accepts.
func (h *HTTP) refuseMethod(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", http.MethodPost)
	how := "this endpoint accepts POST only"
	if h.legacy != nil {
		how = transports
	}
	writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "method %s not allowed without an Mcp-Session-Id: %s", r.Method, how), http.StatusMethodNotAllowed)
}

// shapeOf is shapes.of, when the dispatcher's handler plans reads by shape
// (ok is false otherwise: nothing would be remembered by it).
func (h *HTTP) shapeOf(r *http.Request, body []byte) (key shapeKey, idStart, idEnd int, ok bool) {
	if !h.d.o.Plans {
		return key, 0, 0, false
	}
	buf := shapeBufs.Get().(*[]byte)
	defer shapeBufs.Put(buf)
	return h.shapes.of(buf, r, body)
}

// checkPost checks the media types of a POST, answering a failure itself,
// and reports whether the caller accepts an event stream.
func checkPost(w http.ResponseWriter, r *http.Request) (wantSSE, ok bool) {
	if mcp.MediaType(r.Header.Get("Content-Type")) != "application/json" {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "Content-Type must be application/json"), http.StatusUnsupportedMediaType)
		return false, false
	}
	wantJSON, wantSSE := accepts(r.Header.Values("Accept"))
	if !wantJSON && !wantSSE {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "Accept must include application/json or text/event-stream"), http.StatusNotAcceptable)
		return false, false
	}
	return wantSSE, true
}

// readMessage reads and decodes the body, answering a failure itself.
func readMessage(w http.ResponseWriter, r *http.Request) (*jsonrpc.Message, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return nil, false
	}
	return decodeMessage(w, body)
}

// readBody reads the body, answering a failure itself.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "request body larger than %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
			return nil, false
		}
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeParseError, "reading body: %v", err), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

// decodeMessage decodes the body, answering a failure itself.
func decodeMessage(w http.ResponseWriter, body []byte) (*jsonrpc.Message, bool) {
	msg, rpcErr := jsonrpc.Decode(body)
	if rpcErr != nil {
		var id json.RawMessage
		if msg != nil {
			id = msg.ID
		}
		writeError(w, id, rpcErr, http.StatusBadRequest)
		return nil, false
	}
	return msg, true
}

// headerMirror is the mcp.Mirror of Streamable HTTP: the request headers.
type headerMirror http.Header

// Check verifies that header field is present once and, decoded, is want.
func (m headerMirror) Check(field, want string) *jsonrpc.Error {
	raw := http.Header(m).Values(field)
	if len(raw) != 1 {
		return jsonrpc.Errorf(jsonrpc.CodeHeaderMismatch, "header %s is required exactly once", field)
	}
	got, err := mcp.DecodeHeader(raw[0])
	if err != nil {
		return jsonrpc.Errorf(jsonrpc.CodeHeaderMismatch, "header %s: %v", field, err)
	}
	if got != want {
		return jsonrpc.Errorf(jsonrpc.CodeHeaderMismatch, "header %s does not match the request body", field)
	}
	return nil
}

// Absent verifies that header field is not sent.
func (m headerMirror) Absent(field string) *jsonrpc.Error {
	if len(http.Header(m).Values(field)) > 0 {
		return jsonrpc.Errorf(jsonrpc.CodeHeaderMismatch, "header %s is sent but the request body has no value for it", field)
	}
	return nil
}

// httpWriter answers with JSON, or switches to SSE when a notification must
// go out first (and the client accepts SSE; otherwise notifications are
// dropped and the answer comes alone).
type httpWriter struct {
	w      http.ResponseWriter
	sseOK  bool
	legacy bool        // errors travel with HTTP 200, as legacy clients expect
	stream *sse.Writer // set once streaming
}

// errNoEventStream: the caller accepts no event stream, so nothing can go
// ahead of its answer.
var errNoEventStream = errors.New("the client accepts no event stream")

func (o *httpWriter) Notify(msg []byte) error {
	if !o.sseOK {
		return errNoEventStream
	}
	if o.stream == nil {
		o.stream = sse.NewWriter(o.w)
		o.w.WriteHeader(http.StatusOK)
	}
	return o.stream.Event(msg)
}

func (o *httpWriter) KeepAlive() error {
	if o.stream == nil {
		return nil
	}
	return o.stream.Comment("keep-alive")
}

func (o *httpWriter) Result(id, res json.RawMessage) {
	if o.stream != nil {
		_ = o.stream.Event(jsonrpc.AppendResult(nil, id, res))
		return
	}
	// The result is written in place, not copied into one buffer: for a
	// cache hit this copy would be most of the work left. A client that
	// stops reading fails the write rather than holding it.
	rc := http.NewResponseController(o.w)
	_ = rc.SetWriteDeadline(time.Now().Add(sse.WriteTimeout))
	h := o.w.Header()
	h["Content-Type"] = jsonType // canonical keys: no need for Set
	h["Content-Length"] = []string{strconv.Itoa(len(resultPrefix) + len(id) + len(resultInfix) + len(res) + len(resultSuffix))}
	o.w.WriteHeader(http.StatusOK)
	for _, p := range [][]byte{resultPrefix, id, resultInfix, res, resultSuffix} {
		_, _ = sse.WriteStallBound(o.w, rc, sse.WriteTimeout, p)
	}
}

func (o *httpWriter) Error(id json.RawMessage, e *jsonrpc.Error) {
	if o.stream != nil {
		_ = o.stream.Event(jsonrpc.AppendError(nil, id, e))
		return
	}
	code := status(e.Code)
	switch {
	case e.Code == jsonrpc.CodeRateLimited:
		setRetryAfter(o.w, e)
		code = http.StatusTooManyRequests
	case o.legacy:
		code = http.StatusOK
	case e.Unavailable:
		// A service Manifold depends on is down (a token service): the
		// caller is told when to come back.
		setRetryAfter(o.w, e)
		code = http.StatusServiceUnavailable
	}
	writeError(o.w, id, e, code)
}

// setRetryAfter turns a rate-limit error's data.retryAfterMs into the
// Retry-After header (whole seconds, at least 1).
func setRetryAfter(w http.ResponseWriter, e *jsonrpc.Error) {
	var d struct {
		RetryAfterMs int64 `json:"retryAfterMs"`
	}
	_ = json.Unmarshal(e.Data, &d)
	w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(time.Duration(d.RetryAfterMs)*time.Millisecond)))
}

var (
	// jsonType is every JSON answer's Content-Type, shared: net/http only
	// reads it.
	jsonType     = []string{"application/json"}
	resultPrefix = []byte(`{"jsonrpc":"2.0","id":`)
	resultInfix  = []byte(`,"result":`)
	resultSuffix = []byte(`}`)
)

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
