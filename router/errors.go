package router

import (
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// legalize turns an upstream's error into one Manifold may send under
// 2026-07-28.
//
//   - A read's not-found, legacy -32002 or modern -32602, becomes -32602 with
//     the merged-view URI in data.uri (other data members are kept).
//   - Codes a client can act on pass through: -32601 (the upstream does not
//     serve the method), -32602, -32603, -32021 (the caller's own capabilities
//     were forwarded and found wanting), and every application code outside
//     the JSON-RPC reserved range.
//   - A code JSON-RPC does not allow (validCode) is -32603 saying so: its
//     message, which the upstream never meant for anyone (code 0 is an
//     exception's text, unset), stays in the log (Router.call).
//   - Everything else (a parse or envelope error, a header mismatch or
//     version error between Manifold and the upstream, a code in the range
//     the spec reserves) is Manifold's problem, not the caller's: -32603,
//     with a message naming the upstream.
func legalize(upstream, method, uri string, e *jsonrpc.Error) *jsonrpc.Error {
	if method == mcp.MethodResourcesRead && (e.Code == jsonrpc.CodeLegacyResourceNotFound || e.Code == jsonrpc.CodeInvalidParams) {
		data, err := jsonrpc.ParseObject(e.Data)
		if err != nil {
			data = jsonrpc.Object{}
		}
		_ = data.Set("uri", uri)
		msg := e.Message
		if msg == "" {
			msg = "resource not found"
		}
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg, Data: data.Marshal()}
	}
	if !validCode(e.Code) {
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "upstream %s answered an invalid error (code %d); its detail is in Manifold's log", upstream, e.Code).
			WithData(map[string]any{"upstream": upstream, "upstreamCode": e.Code})
	}
	if legal(e.Code) {
		return e
	}
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "upstream %s: %s (code %d)", upstream, e.Message, e.Code).
		WithData(map[string]any{"upstream": upstream, "upstreamCode": e.Code})
}

func legal(code int64) bool {
	switch code {
	case jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams, jsonrpc.CodeInternalError, jsonrpc.CodeMissingCapability:
		return true
	}
	return code > -32000 || code < -32768
}

// validCode reports whether code is one an upstream may answer with.
// JSON-RPC 2.0 reserves -32768..-32000: there only the codes it defines
// (-32700, -32600..-32603) and the implementation-defined server errors
// (-32099..-32000, where MCP's own live: -32002, -32020..-32022, -32042)
// are valid. Any other integer is an application's own, but 0: it is what
// an error whose code was never set carries, an exception passed on as it
// was thrown, and no protocol gives it a meaning.
func validCode(code int64) bool {
	switch {
	case code == 0:
		return false
	case code < -32768 || code > -32000:
		return true
	case code >= -32099:
		return true
	}
	switch code {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams, jsonrpc.CodeInternalError:
		return true
	}
	return false
}

// An invalid error's message is logged at most this long, and an
// upstream's invalid errors at most once per invalidErrorEvery: an
// upstream answering them to every call costs a line now and then.
const (
	maxLoggedMessage  = 256
	invalidErrorEvery = 10 * time.Second
)
