package router

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// An upstream's own requestState. A modern server that asks its caller
// something answers input_required with a requestState of its own, which
// the caller sends back with its answers. The server cannot tell
// Manifold's callers apart (they all reach it through Manifold), so
// Manifold binds the state to the caller it hands it to: it goes out
// encrypted under a key of the caller's owner (ownerOf: principal and
// credential; internal/seal), for its request's target, and
// a retry is let through, with the server's own state, only from that
// caller. It is sealed with the router's secret, which replicas share as
// they share cursors, so a retry may reach any of them.

// passPrefix marks an upstream's requestState that Manifold sealed.
const passPrefix = "manifold.pass."

// passing reports whether req is the retry of an upstream's question.
func passing(req *mcp.Request) bool {
	return strings.HasPrefix(req.Params.String("requestState"), passPrefix)
}

// sealPassed seals the upstream's requestState in res, if it has one of
// its own, for the caller of req, a request of m; res is returned as it
// is otherwise. A list page or Manifold's own description asks nothing,
// and is not searched for a state (a page may be megabytes).
func (hs *holds) sealPassed(ctx context.Context, m *mcp.Method, req *mcp.Request, res json.RawMessage) json.RawMessage {
	if m.Route == mcp.RouteAll || m.Route == mcp.RouteLocal || !bytes.Contains(res, []byte(`"requestState"`)) {
		return res
	}
	state, ok := jsonrpc.MemberString(res, "requestState")
	if !ok || strings.HasPrefix(state, "manifold.") {
		return res // Manifold's own (a held call, a consent)
	}
	sealed, err := hs.pass.Seal(hs.ownerOf(ctx, req), passTarget(req), []byte(state))
	obj, perr := jsonrpc.ParseObject(res)
	if err != nil || perr != nil {
		return res
	}
	_ = obj.Set("requestState", passPrefix+base64.RawURLEncoding.EncodeToString(sealed))
	return obj.Marshal()
}

// passTarget is what a state answers: its request's method and the name
// or URI it names, so that a state is not taken to another tool.
func passTarget(req *mcp.Request) string {
	return req.Method + "\x00" + req.Params.String("name") + "\x00" + req.Params.String("uri")
}

// openPassed is req with the upstream's own requestState in place of the
// sealed one, if req's caller is the one it was issued to, for the same
// target. The state is encrypted, not only signed: a caller who got hold
// of another's cannot take the upstream's state out of it and send it
// bare.
func (hs *holds) openPassed(ctx context.Context, req *mcp.Request) (*mcp.Request, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(strings.TrimPrefix(req.Params.String("requestState"), passPrefix))
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "requestState: malformed")
	}
	state, err := hs.pass.Open(hs.ownerOf(ctx, req), passTarget(req), raw)
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "requestState: issued to another caller or request, or tampered")
	}
	sub := *req
	sub.Params = req.Params.Clone()
	sub.Params["requestState"] = jsonrpc.Quote(string(state))
	sub.Shape = nil // a retry is checked each time it comes
	return &sub, nil
}
