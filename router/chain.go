package router

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// Link wraps a Handler with one cross-cutting concern, as a plugin does in
// CoreDNS's chain: tracing, metrics, and whatever comes next.
type Link func(Handler) Handler

// Chain returns h wrapped in links, the first outermost.
func Chain(h Handler, links ...Link) Handler {
	for i := len(links) - 1; i >= 0; i-- {
		h = links[i](h)
	}
	return h
}

var tracer = otel.Tracer("github.com/manifold-mcp/manifold/router")

// Traced makes each request a server span, the child of the caller's trace
// context: the one in the request's `_meta` (MCP's place for it), else the
// one in its HTTP headers. Everything Manifold does for the request (cache
// lookups, upstream calls, one child per upstream of a fan-out) nests under
// it, and the upstreams receive its context.
func Traced() Link {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
			ctx = callerContext(ctx, req)
			ctx, span := tracer.Start(ctx, req.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("mcp.method.name", req.Method)))
			defer span.End()
			res, err := next.Handle(ctx, req)
			if code := Code(err); code != "ok" {
				span.SetAttributes(attribute.String("rpc.jsonrpc.error_code", code))
				span.SetStatus(codes.Error, err.Error())
			}
			return res, err
		})
	}
}

// callerContext extracts the caller's trace context.
func callerContext(ctx context.Context, req *mcp.Request) context.Context {
	prop := otel.GetTextMapPropagator()
	if tp := req.Meta.String(mcp.MetaTraceparent); tp != "" {
		carrier := propagation.MapCarrier{mcp.MetaTraceparent: tp}
		if ts := req.Meta.String(mcp.MetaTracestate); ts != "" {
			carrier[mcp.MetaTracestate] = ts
		}
		return prop.Extract(ctx, carrier)
	}
	if req.Header != nil {
		return prop.Extract(ctx, propagation.HeaderCarrier(req.Header))
	}
	return ctx
}

// Observed tells observe of every request: its context (which names the
// endpoint it came to, upstream.ViewOf), its method, how long it took and
// its outcome.
func Observed(observe func(ctx context.Context, method string, d time.Duration, err error)) Link {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
			start := time.Now()
			res, err := next.Handle(ctx, req)
			observe(ctx, req.Method, time.Since(start), err)
			return res, err
		})
	}
}

// Code is the JSON-RPC error code of a handler's outcome, as a label:
// "ok" for a result, the code for a JSON-RPC error, and the internal
// error's code for anything else (which the frontends answer that way).
func Code(err error) string {
	if err == nil {
		return "ok"
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return strconv.Itoa(int(rpcErr.Code))
	}
	return strconv.Itoa(jsonrpc.CodeInternalError)
}
