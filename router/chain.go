package router

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/mcptrace"
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

func serverSpan() []trace.SpanStartOption {
	return []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
}

// Traced makes each request a server span, the child of the caller's trace
// context: the one in the request's `_meta` (MCP's place for it), else the
// one in its HTTP headers. Everything Manifold does for the request (cache
// lookups, upstream calls, one child per upstream of a fan-out) nests under
// it, and the upstreams receive its context. The span speaks MCP as the
// semantic conventions do (internal/mcptrace), with the caller's revision
// and, for a legacy caller, its session's digest.
func Traced() Link {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
			ctx, span := mcptrace.Start(callerContext(ctx, req), tracer, req.Method, serverSpan)
			defer span.End()
			recording := span.IsRecording() // nothing is worked out for a span no one keeps
			if recording {
				describeServed(ctx, span, req)
			}
			res, err := next.Handle(ctx, req)
			if recording {
				mcptrace.Answered(span, req.Method, res, rpcError(err))
			}
			return res, err
		})
	}
}

// describeServed sets what the server span of req says of the caller.
func describeServed(ctx context.Context, span trace.Span, req *mcp.Request) {
	mcptrace.Describe(span, req.Method, req.Params)
	version := sessionVersion(ctx)
	if version == "" {
		version = req.Meta.String(mcp.MetaProtocolVersion)
	}
	if version != "" {
		span.SetAttributes(mcptrace.Version(version))
	}
	if sid := SessionOf(ctx); sid != "" {
		span.SetAttributes(mcptrace.Session(sid))
	}
}

// rpcError is the JSON-RPC error a handler's error is answered with (an
// error of Manifold's own is an internal error), or nil; a consent's
// without its link, which is for the caller alone.
func rpcError(err error) *jsonrpc.Error {
	if err == nil {
		return nil
	}
	var le *linkError
	if errors.As(err, &le) {
		return le.redacted()
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return rpcErr
	}
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "%v", err)
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
	if carriesContext(req.Header) {
		return prop.Extract(ctx, propagation.HeaderCarrier(req.Header))
	}
	return ctx
}

// carriesContext reports whether h holds a field the propagator reads
// (Manifold installs W3C trace context and baggage): most requests carry
// none, and asking the propagator costs a canonicalized lookup per field.
func carriesContext(h http.Header) bool {
	_, tp := h["Traceparent"]
	_, bg := h["Baggage"]
	return tp || bg
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
