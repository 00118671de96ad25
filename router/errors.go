package router

import (
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
