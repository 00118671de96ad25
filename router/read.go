package router

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
)

// read routes a resources/read (m) to the upstream that serves its URI;
// n is the request's note.
func (r *Router) read(ctx context.Context, set *upstream.Set, m *mcp.Method, req *mcp.Request, n *Note) (json.RawMessage, error) {
	uri, ok := req.Params.Str("uri")
	if !ok {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.uri must be a string")
	}
	if !validURI(uri) {
		return nil, notFound(uri, "invalid resource URI")
	}
	if !set.View().Shows(mcp.MethodResourcesRead, uri) {
		return nil, notFound(uri, "resource not found")
	}
	if r.ns.Prefix {
		name, inner, ok := r.ns.Split(uri)
		u := set.Get(name)
		if !ok || u == nil {
			return nil, notFound(uri, "no upstream serves this URI prefix")
		}
		h := hop{u: u, m: m, req: req, note: n}
		if req.Shape != nil && r.cache != nil {
			return r.planned(ctx, set, h, uri, inner)
		}
		return r.readFrom(ctx, h, uri, inner)
	}
	// Without namespaces: the upstream that lists the URI, else those whose
	// templates match, else each in turn until one has it.
	var lastErr error
	routes, seen := r.routesOf(set), set.Names()
	for _, name := range routes.candidates(seen, uri) {
		res, err := r.readFrom(ctx, hop{u: set.Get(name), m: m, req: req, note: n}, uri, uri)
		if err == nil {
			routes.served(uri, name, seen)
			return res, nil
		}
		switch {
		case isNotFound(err):
			routes.gone(uri, name)
		case !isUnavailable(err):
			return nil, err
		}
		if lastErr == nil || isUnavailable(err) {
			lastErr = err
		}
	}
	if lastErr == nil {
		lastErr = notFound(uri, "resource not found")
	}
	if ue, ok := lastErr.(*unavailableError); ok {
		return nil, ue.rpc()
	}
	return nil, lastErr
}

// readFrom is h's read of the merged-view uri, inner in its upstream's
// own view.
func (r *Router) readFrom(ctx context.Context, h hop, uri, inner string) (json.RawMessage, error) {
	sub := *h.req
	if inner != uri {
		sub.Params = h.req.Params.Clone()
		sub.Params["uri"] = jsonrpc.Quote(inner)
	}
	h.req, h.uri = &sub, uri
	res, err := r.fetch(ctx, h)
	if err != nil {
		var ue *unavailableError
		if errors.As(err, &ue) {
			r.log.Debug("read failed", "upstream", h.u.Name(), "err", ue.err)
			if r.ns.Prefix {
				return nil, ue.rpc()
			}
		}
		return nil, err
	}
	return res, nil
}

func notFound(uri, msg string) *jsonrpc.Error {
	return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "%s", msg).WithData(mcp.NotFoundData{URI: uri})
}

func isNotFound(err error) bool {
	var e *jsonrpc.Error
	return errors.As(err, &e) && e.Code == jsonrpc.CodeInvalidParams
}

func isUnavailable(err error) bool {
	var ue *unavailableError
	return errors.As(err, &ue)
}
