package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// The upstream's params, spliced. A request the caller sent (req.Raw) goes
// on with few changes: a name or URI without its namespace, the `_meta`
// members of the server's era. So its params are written in one buffer
// from the caller's bytes, in the caller's order, each member's value
// taken from req.Params and req.Meta (where a changed name or URI is)
// rather than from the raw bytes: the result says what the maps say, as
// params would encode them, whoever changed them and however (FuzzSplice
// holds the two to the same request). What the walk cannot match cheaply
// (an escaped or non-ASCII key, a member the caller did not send, a trace
// context to inject) is left to params, which encodes the maps.

// spliceParams is params for a request that carries its raw params, or
// false where params must encode the maps.
func (t *translator) spliceParams(ctx context.Context, s *session, req *mcp.Request) (json.RawMessage, bool) {
	if len(req.Raw) == 0 || trace.SpanContextFromContext(ctx).IsValid() {
		return nil, false
	}
	if _, ok := req.Params["_meta"]; ok {
		return nil, false
	}
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(req.Raw, buf[:0])
	if err != nil {
		return nil, false
	}
	dst := make([]byte, 0, len(req.Raw)+len(t.info)+96)
	dst = append(dst, '{')
	var metaGuide []byte
	found := 0
	for _, m := range members {
		key, ok := jsonrpc.PlainKey(m.Key)
		if !ok {
			return nil, false
		}
		if string(key) == "_meta" {
			metaGuide = m.Value
			continue
		}
		v, ok := req.Params[string(key)]
		if !ok {
			continue // dropped since
		}
		found++
		dst = appendMember(dst, m.Key, v)
	}
	if found != len(req.Params) {
		return nil, false // members added since, which have no place in the guide
	}
	dst, ok := t.appendMeta(dst, s, metaGuide, req.Meta)
	if !ok {
		return nil, false
	}
	return append(dst, '}'), true
}

// appendMember appends "key":value, after a comma unless it is the first
// member of the object dst is writing.
func appendMember(dst, key, value []byte) []byte {
	if dst[len(dst)-1] != '{' {
		dst = append(dst, ',')
	}
	dst = append(dst, key...)
	dst = append(dst, ':')
	return append(dst, value...)
}

var metaKey = []byte(`"_meta"`)

// appendMeta appends the `_meta` member the server of s's era gets (see
// params), its members in the order of guide, the caller's raw `_meta`,
// where it has them; none at all when that `_meta` is empty.
func (t *translator) appendMeta(dst []byte, s *session, guide []byte, meta jsonrpc.Object) ([]byte, bool) {
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(guide, buf[:0])
	if err != nil {
		return nil, false
	}
	start := len(dst)
	dst = appendMember(dst, metaKey, []byte{'{'})
	open := len(dst)
	found := 0
	for _, m := range members {
		key, ok := jsonrpc.PlainKey(m.Key)
		if !ok {
			return nil, false
		}
		v, ok := meta[string(key)]
		if !ok {
			continue
		}
		found++
		switch {
		case s.Modern && string(key) == mcp.MetaProtocolVersion:
			v = modernVersion
		case !s.Modern && bytes.HasPrefix(key, modelcontextprotocol):
			continue
		}
		dst = appendMember(dst, m.Key, v)
	}
	if found != len(meta) {
		dst = t.appendUnguided(dst, s, members, meta)
	}
	if s.Modern {
		dst = t.appendRequired(dst, meta)
	}
	if len(dst) == open {
		return dst[:start], true
	}
	return append(dst, '}'), true
}

var modelcontextprotocol = []byte("io.modelcontextprotocol/")

// appendUnguided appends the members of meta that guide has not (those a
// legacy session supplies, say), by the rules of appendMeta.
func (t *translator) appendUnguided(dst []byte, s *session, guide []jsonrpc.MemberRange, meta jsonrpc.Object) []byte {
	for k, v := range meta {
		if inGuide(guide, k) {
			continue
		}
		switch {
		case s.Modern && k == mcp.MetaProtocolVersion:
			v = modernVersion
		case !s.Modern && strings.HasPrefix(k, "io.modelcontextprotocol/"):
			continue
		}
		if dst[len(dst)-1] != '{' {
			dst = append(dst, ',')
		}
		dst = jsonrpc.AppendQuote(dst, k)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	return dst
}

func inGuide(guide []jsonrpc.MemberRange, k string) bool {
	for _, m := range guide {
		if key, ok := jsonrpc.PlainKey(m.Key); ok && string(key) == k {
			return true
		}
	}
	return false
}

// appendRequired appends the members a modern server requires that meta
// lacks.
func (t *translator) appendRequired(dst []byte, meta jsonrpc.Object) []byte {
	if _, ok := meta[mcp.MetaProtocolVersion]; !ok {
		dst = appendMember(dst, versionKey, modernVersion)
	}
	if _, ok := meta[mcp.MetaClientCapabilities]; !ok {
		dst = appendMember(dst, capabilitiesKey, emptyObject)
	}
	if _, ok := meta[mcp.MetaClientInfo]; !ok {
		dst = appendMember(dst, infoKey, t.info)
	}
	return dst
}

var (
	versionKey      = jsonrpc.Quote(mcp.MetaProtocolVersion)
	capabilitiesKey = jsonrpc.Quote(mcp.MetaClientCapabilities)
	infoKey         = jsonrpc.Quote(mcp.MetaClientInfo)
)

var emptyObject = json.RawMessage(`{}`)
