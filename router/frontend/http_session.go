package frontend

import (
	"errors"
	"net/http"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/sse"
	"github.com/manifold-mcp/manifold/router/session"
)

// The legacy sessions of Streamable HTTP (2025-11-25 and before), on the
// same path as modern requests: initialize opens one (Mcp-Session-Id), POST
// carries its messages, GET opens its stream of notifications, DELETE ends
// it. An unknown or expired session is 404, which tells the client to
// initialize again.

// isLegacyInitialize reports a legacy client's first request: initialize
// without the modern `_meta` protocol version.
func isLegacyInitialize(msg *jsonrpc.Message) bool {
	return msg.Method == mcp.MethodInitialize && msg.IsRequest() && !isModern(msg)
}

// isModern reports a request carrying the modern `_meta` protocol version.
func isModern(msg *jsonrpc.Message) bool {
	// Read in place: the params' split is the request's, taken once later.
	meta, _ := jsonrpc.Member(msg.Params, "_meta")
	_, ok := jsonrpc.Member(meta, mcp.MetaProtocolVersion)
	return ok
}

func (h *HTTP) initialize(w http.ResponseWriter, r *http.Request, msg *jsonrpc.Message) {
	s, res, rpcErr, status := h.legacy.initialize(r.Context(), msg)
	if rpcErr != nil {
		writeError(w, msg.ID, rpcErr, status)
		return
	}
	w.Header().Set(mcp.HeaderSessionID, s.ID)
	(&httpWriter{w: w, legacy: true}).Result(msg.ID, res)
}

func (h *HTTP) serveSession(w http.ResponseWriter, r *http.Request, id string) {
	s, err := h.legacy.Session(r.Context(), id)
	switch {
	case errors.Is(err, session.ErrUnknown):
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "session not found: initialize again"), http.StatusNotFound)
		return
	case err != nil:
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "session store unavailable"), http.StatusServiceUnavailable)
		return
	}
	if v := r.Header.Get(mcp.HeaderProtocolVersion); v != "" && v != s.Version {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "MCP-Protocol-Version %q is not the session's (%s)", v, s.Version), http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodGet:
		h.sessionStream(w, r, s)
	case http.MethodDelete:
		_ = h.legacy.End(r.Context(), s.ID)
		w.WriteHeader(http.StatusOK)
	case http.MethodPost:
		h.sessionPost(w, r, s)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "method %s not allowed", r.Method), http.StatusMethodNotAllowed)
	}
}

func (h *HTTP) sessionPost(w http.ResponseWriter, r *http.Request, s *session.Session) {
	wantSSE, ok := checkPost(w, r)
	if !ok {
		return
	}
	msg, ok := readMessage(w, r)
	if !ok {
		return
	}
	if !msg.IsRequest() {
		h.legacy.Message(r.Context(), s, msg)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	h.legacy.Serve(r.Context(), s, msg, r.Header, &httpWriter{w: w, sseOK: wantSSE, legacy: true})
}

// sessionStream is the GET stream of a session: its notifications, until
// the client leaves or the session ends.
func (h *HTTP) sessionStream(w http.ResponseWriter, r *http.Request, s *session.Session) {
	if _, wantSSE := accepts(r.Header.Values("Accept")); !wantSSE {
		writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "Accept must include text/event-stream"), http.StatusNotAcceptable)
		return
	}
	stream := sse.NewWriter(w)
	w.WriteHeader(http.StatusOK)
	if stream.Comment("session stream") != nil {
		return
	}
	_ = h.legacy.Notifications(r.Context(), s.ID, stream.Event, func() error { return stream.Comment("keep-alive") })
}
