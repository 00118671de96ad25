// Package mcptrace describes MCP requests on spans the way the OpenTelemetry
// MCP and GenAI semantic conventions do (docs/gen-ai/mcp.md of the
// conventions), for the server span of a request Manifold serves (router)
// and the client span of each call it makes upstream (upstream) alike:
// the span name `{mcp.method.name} {target}` (the tool's or prompt's name),
// mcp.method.name, mcp.resource.uri, mcp.session.id (a digest: a session
// id is a bearer of its session), gen_ai.tool.name with
// gen_ai.operation.name execute_tool, gen_ai.prompt.name, and on failure
// error.type (the JSON-RPC code, tool_error for a tool that reported one)
// with rpc.response.status_code. Where the conventions have no name,
// Manifold's own (manifold.*) are set by the packages that know them.
//
// Only the OpenTelemetry API and its attribute names are used here; the
// callers ask for the attributes only when their span is recording, and
// start a span at all only when a tracer provider is installed (Start).
package mcptrace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// unset is the global tracer provider before any is installed: it keeps
// nothing, yet each span started through it costs allocations (a span, a
// context, the options).
var unset = otel.GetTracerProvider()

// none is a span that records nothing and ends nothing.
var none = trace.SpanFromContext(context.Background())

// On reports whether a tracer provider is installed.
func On() bool { return otel.GetTracerProvider() != unset }

// Start is tracer.Start when a tracer provider is installed, else ctx as
// it is (a caller's remote span context still reaches the upstreams) and
// a span that does nothing: never the one ctx carries, which is not the
// caller's to end. opts is called only to start a span, so the options
// cost nothing when tracing is off.
func Start(ctx context.Context, tracer trace.Tracer, name string, opts func() []trace.SpanStartOption) (context.Context, trace.Span) {
	if !On() {
		return ctx, none
	}
	if opts == nil {
		return tracer.Start(ctx, name)
	}
	return tracer.Start(ctx, name, opts()...)
}

// ExecuteTool is gen_ai.operation.name for a tool call.
const ExecuteTool = "execute_tool"

// ToolError is error.type for a tool call whose result says isError.
const ToolError = "tool_error"

// Describe names span after the request (method, params) and sets what
// the conventions say of it.
func Describe(span trace.Span, method string, params jsonrpc.Object) {
	attrs := []attribute.KeyValue{semconv.McpMethodNameKey.String(method)}
	name := method
	switch method {
	case mcp.MethodResourcesRead, mcp.MethodSubscribe, mcp.MethodUnsubscribe:
		if uri, ok := params.Str("uri"); ok {
			attrs = append(attrs, semconv.McpResourceURIKey.String(uri))
		}
	case mcp.MethodToolsCall:
		if tool, ok := params.Str("name"); ok {
			attrs = append(attrs, semconv.GenAIToolNameKey.String(tool))
			name += " " + tool
		}
		attrs = append(attrs, semconv.GenAIOperationNameKey.String(ExecuteTool))
	case mcp.MethodPromptsGet:
		if prompt, ok := params.Str("name"); ok {
			attrs = append(attrs, semconv.GenAIPromptNameKey.String(prompt))
			name += " " + prompt
		}
	case mcp.MethodComplete:
		if ref, err := params.Object("ref"); err == nil && ref.String("type") == "ref/prompt" {
			attrs = append(attrs, semconv.GenAIPromptNameKey.String(ref.String("name")))
		}
	}
	span.SetName(name)
	span.SetAttributes(attrs...)
}

// Version is mcp.protocol.version.
func Version(v string) attribute.KeyValue { return semconv.McpProtocolVersionKey.String(v) }

// Session is mcp.session.id: the digest of the session id, never the id.
func Session(id string) attribute.KeyValue { return semconv.McpSessionIDKey.String(SessionDigest(id)) }

// SessionDigest names a session where its id must not appear (a span, an
// audit record).
func SessionDigest(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// Answered records the answer to a request of method: a JSON-RPC error
// (rpcErr), or a result, which for a tool call may report an error of its
// own.
func Answered(span trace.Span, method string, result json.RawMessage, rpcErr *jsonrpc.Error) {
	if rpcErr != nil {
		code := strconv.FormatInt(rpcErr.Code, 10)
		span.SetAttributes(semconv.ErrorTypeKey.String(code), semconv.RPCResponseStatusCodeKey.String(code))
		span.SetStatus(codes.Error, rpcErr.Message)
		return
	}
	if method != mcp.MethodToolsCall || len(result) == 0 {
		return
	}
	if obj, err := jsonrpc.ParseObject(result); err == nil && string(obj["isError"]) == "true" {
		span.SetAttributes(semconv.ErrorTypeKey.String(ToolError))
		span.SetStatus(codes.Error, "the tool reported an error")
	}
}

// Failed records a request that got no answer: err is a transport's or
// Manifold's own failure, classed as the conventions' error.type.
func Failed(span trace.Span, err error) {
	class := "_OTHER"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		class = "timeout"
	case errors.Is(err, context.Canceled):
		class = "cancelled"
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(class))
	span.SetStatus(codes.Error, err.Error())
}
