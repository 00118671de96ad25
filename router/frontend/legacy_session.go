package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router/session"
)

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
