package router

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
)

// read routes a resources/read to the upstream that serves its URI.
func (r *Router) read(ctx context.Context, set *upstream.Set, req *mcp.Request) (json.RawMessage, error) {
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
		if req.Shape != nil && r.cache != nil {
			return r.planned(ctx, set, u, req, uri, inner)
		}
		return r.readFrom(ctx, u, req, uri, inner)
	}
	// Without namespaces: the upstream that lists the URI, else those whose
	// templates match, else each in turn until one has it.
	var lastErr error
	routes, seen := r.routesOf(set), set.Names()
	for _, name := range routes.candidates(seen, uri) {
		res, err := r.readFrom(ctx, set.Get(name), req, uri, uri)
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

func (r *Router) readFrom(ctx context.Context, u *upstream.Upstream, req *mcp.Request, uri, inner string) (json.RawMessage, error) {
	sub := *req
	if inner != uri {
		sub.Params = req.Params.Clone()
		sub.Params["uri"] = jsonrpc.Quote(inner)
	}
	res, err := r.fetch(ctx, u, &sub, uri)
	if err != nil {
		var ue *unavailableError
		if errors.As(err, &ue) {
			r.log.Debug("read failed", "upstream", u.Name(), "err", ue.err)
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
