package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// translator writes a call in its server's era and reads the answer back
// in the modern one: the params either era expects (spliced from the
// caller's bytes where the walk can, splice.go; encoded from the maps
// otherwise), the caller headers passed on, and a legacy server's result
// made to look modern. It reads nothing but the options below, fixed when
// the client is built, so it needs no lock.
type translator struct {
	name    string          // the upstream's, for errors
	info    json.RawMessage // Options.ClientInfo, encoded once: it goes in every modern call
	forward []string        // Options.ForwardHeaders
	ttl     time.Duration   // Options.DefaultTTL
	scope   string          // Options.DefaultScope
	// private says a process per principal answers: its cacheable results
	// are its principal's, whatever the server says.
	private bool
}

// modernVersion is mcp.Version as a JSON string.
var modernVersion = jsonrpc.Quote(mcp.Version)

// params builds the params a server of s's era expects for req.
//
// A modern server gets the caller's `_meta` with the protocol version set
// and the required keys filled in. A legacy server gets the `_meta` keys that
// existed before 2026-07-28 (progressToken, trace context, anything a caller
// added) and none of the `io.modelcontextprotocol/` request keys, which it
// would not understand and might reject.
func (t *translator) params(ctx context.Context, s *session, req *mcp.Request) json.RawMessage {
	if b, ok := t.spliceParams(ctx, s, req); ok {
		return b
	}
	return t.encodeParams(ctx, s, req)
}

// encodeParams is params, from the maps alone.
func (t *translator) encodeParams(ctx context.Context, s *session, req *mcp.Request) json.RawMessage {
	p := jsonrpc.Object{}
	for k, v := range req.Params {
		p[k] = v
	}
	meta := jsonrpc.Object{}
	for k, v := range req.Meta {
		meta[k] = v
	}
	if s.Modern {
		meta[mcp.MetaProtocolVersion] = modernVersion
		if _, ok := meta[mcp.MetaClientCapabilities]; !ok {
			meta[mcp.MetaClientCapabilities] = json.RawMessage(`{}`)
		}
		if _, ok := meta[mcp.MetaClientInfo]; !ok {
			meta[mcp.MetaClientInfo] = t.info
		}
	} else {
		for k := range meta {
			if strings.HasPrefix(k, "io.modelcontextprotocol/") {
				delete(meta, k)
			}
		}
	}
	traceMeta(ctx, meta)
	if len(meta) > 0 {
		p["_meta"] = meta.Marshal()
	} else {
		delete(p, "_meta")
	}
	return p.Marshal()
}

// traceMeta puts the current trace context in meta (traceparent,
// tracestate), where MCP carries it, so the server's spans are children of
// this call's. With tracing off the context is the caller's own, which
// thus passes through as it came.
func traceMeta(ctx context.Context, meta jsonrpc.Object) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	for _, k := range []string{mcp.MetaTraceparent, mcp.MetaTracestate} {
		if v, ok := carrier[k]; ok {
			meta[k] = jsonrpc.Quote(v)
		}
	}
}

// response makes a legacy server's answer look modern: a result
// gets its resultType (a legacy result is always complete) and, for a
// cacheable method, the cache hints the operator configured in place of the
// ones a legacy server does not send. Error codes are left for the router,
// which knows the request and the namespace.
func (t *translator) response(s *session, req *mcp.Request, how How, r *transport.Reply) *Response {
	method := req.Method
	if r.Error != nil {
		return &Response{Error: r.Error}
	}
	if s.Modern && !t.private || how.alone(req) {
		// Modern already; or legacy for a legacy caller, and shared with
		// no other (no cache keeps it): as it came.
		return &Response{Result: r.Result}
	}
	res, err := jsonrpc.ParseValid(r.Result) // Decode checked it with its message
	if err != nil {
		return &Response{Error: jsonrpc.Errorf(jsonrpc.CodeInternalError, "upstream %s sent a result that is not an object", t.name)}
	}
	if _, ok := res["resultType"]; !ok {
		res["resultType"] = json.RawMessage(`"` + mcp.ResultTypeComplete + `"`)
	}
	if mcp.Cacheable(method) {
		if _, ok := res["ttlMs"]; !ok {
			_ = res.Set("ttlMs", t.ttl.Milliseconds())
		}
		if _, ok := res["cacheScope"]; !ok {
			_ = res.Set("cacheScope", t.scope)
		}
		if t.private {
			// Its principal's process answered: for no one else, whatever
			// the server, which cannot know it runs per principal, says.
			_ = res.Set("cacheScope", mcp.ScopePrivate)
		}
	}
	return &Response{Result: res.Marshal()}
}

// forwarded is what of the caller's headers h goes on to the server.
func (t *translator) forwarded(h http.Header) http.Header {
	if len(t.forward) == 0 || h == nil {
		return nil
	}
	out := http.Header{}
	for _, name := range t.forward {
		if v := h.Values(name); len(v) > 0 {
			out[http.CanonicalHeaderKey(name)] = v
		}
	}
	return out
}
