package frontend

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router/session"
)

// modernOnly are the result members of 2026-07-28 a legacy caller must not
// see.
var modernOnly = []string{"resultType", "ttlMs", "cacheScope", "inputRequests", "requestState"}

// legacyResult gives a result the shape of the legacy revisions: the
// members only 2026-07-28 has are cut out at byte level, the others kept
// as the upstream wrote them, in their order (a map's decode and encode
// was 1.8 µs of a legacy caller's read, scripts/profile-hop CALLER=legacy).
// Only a `_meta` holding the modern revision's keys is decoded, to take
// them out. FuzzLegacyResult holds it to the decode-and-encode it replaced.
func legacyResult(raw json.RawMessage) json.RawMessage {
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(raw, buf[:0])
	if err != nil {
		return raw
	}
	var out []byte
	for i, m := range members {
		v, keep, same := legacyMember(m)
		if out == nil && same {
			continue // unchanged so far: nothing written yet
		}
		if out == nil {
			out = make([]byte, 0, len(raw))
			out = append(out, '{')
			for _, before := range members[:i] {
				out = appendMember(out, before.Key, before.Value)
			}
		}
		if keep {
			out = appendMember(out, m.Key, v)
		}
	}
	if out == nil {
		return raw // as the upstream sent it (a legacy session's answer)
	}
	return append(out, '}')
}

// legacyMember is m's value in a legacy result, whether m stays, and
// whether it stays as it was.
func legacyMember(m jsonrpc.MemberRange) (v json.RawMessage, keep, same bool) {
	for _, k := range modernOnly {
		if jsonrpc.KeyIs(m.Key, k) {
			return nil, false, false
		}
	}
	if !jsonrpc.KeyIs(m.Key, "_meta") || !bytes.Contains(m.Value, []byte(`"io.modelcontextprotocol/`)) {
		return m.Value, true, true
	}
	meta, err := jsonrpc.ParseObject(m.Value)
	if err != nil {
		return m.Value, true, true
	}
	for k := range meta {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			delete(meta, k)
		}
	}
	if len(meta) == 0 {
		return nil, false, false
	}
	return meta.Marshal(), true, false
}

// appendMember appends the member k: v to the object being written in b
// (which holds its opening brace).
func appendMember(b, k, v []byte) []byte {
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, k...)
	b = append(b, ':')
	return append(b, v...)
}

// legacyError gives an error the legacy revisions' codes: a resource that
// does not exist is -32002; a URL the user must open, which the client
// cannot be asked to (-32021 naming it), is -32042, URL elicitation
// required.
func legacyError(method string, e *jsonrpc.Error) *jsonrpc.Error {
	if e.Code == jsonrpc.CodeMissingCapability {
		return urlElicitationRequired(e)
	}
	if method != mcp.MethodResourcesRead || e.Code != jsonrpc.CodeInvalidParams {
		return e
	}
	data, err := jsonrpc.ParseObject(e.Data)
	if err != nil || data.String("uri") == "" {
		return e
	}
	c := *e
	c.Code = jsonrpc.CodeLegacyResourceNotFound
	return &c
}

// urlElicitationRequired is the legacy form of a consent the client
// cannot be asked for: -32042 with the URL to open.
func urlElicitationRequired(e *jsonrpc.Error) *jsonrpc.Error {
	data, err := jsonrpc.ParseObject(e.Data)
	if err != nil || data.String("url") == "" {
		return e
	}
	c := jsonrpc.Errorf(jsonrpc.CodeURLElicitationRequired, "%s", e.Message)
	return c.WithData(map[string]any{"elicitations": []map[string]string{{
		"mode": "url", "elicitationId": session.NewID(), "url": data.String("url"), "message": data.String("message"),
	}}})
}
