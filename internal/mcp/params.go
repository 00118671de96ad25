package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// HeaderParamPrefix starts the header that mirrors a tool argument
// annotated with x-mcp-header (SEP-2243).
const HeaderParamPrefix = "Mcp-Param-"

// ParamHeader is one tool parameter mirrored in a header on Streamable HTTP:
// the argument Param travels, as Type dictates, in Mcp-Param-<Header> too.
type ParamHeader struct {
	Param, Header, Type string
}

// MayMirror reports whether the JSON of a tool definition may carry an
// x-mcp-header annotation: it spells the key out, or has a \u escape,
// which could spell it another way. Most tools have neither, so a list
// decodes only the few that may (ParamHeaders).
func MayMirror(tool []byte) bool {
	return bytes.Contains(tool, []byte("x-mcp-header")) || bytes.Contains(tool, []byte(`\u`))
}

// ParamHeaders reads the x-mcp-header annotations of a tool definition's
// inputSchema properties. An error says why the annotations are invalid, in
// which case the tool must not be offered: a name that is empty or not an
// HTTP token, a parameter that is not a string, integer or boolean, or two
// parameters mirrored in one header (compared case-insensitively).
func ParamHeaders(tool jsonrpc.Object) ([]ParamHeader, error) {
	schema, err := tool.Object("inputSchema")
	if err != nil {
		return nil, nil // not our concern: the tool is what its server made it
	}
	props, err := schema.Object("properties")
	if err != nil {
		return nil, nil
	}
	var out []ParamHeader
	seen := map[string]bool{}
	for param, raw := range props {
		prop, err := jsonrpc.ParseObject(raw)
		if err != nil {
			continue
		}
		rawName, annotated := prop["x-mcp-header"]
		if !annotated {
			continue
		}
		var name string
		if json.Unmarshal(rawName, &name) != nil || !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("parameter %q: x-mcp-header %s is not a header name", param, rawName)
		}
		typ := prop.String("type")
		if typ != "string" && typ != "integer" && typ != "boolean" {
			return nil, fmt.Errorf("parameter %q: x-mcp-header on a %q parameter (only string, integer and boolean)", param, typ)
		}
		if key := strings.ToLower(name); seen[key] {
			return nil, fmt.Errorf("x-mcp-header %q names two parameters", name)
		} else {
			seen[key] = true
		}
		out = append(out, ParamHeader{Param: param, Header: HeaderParamPrefix + name, Type: typ})
	}
	return out, nil
}

// ErrBadArgument reports an argument whose value its annotation cannot
// carry.
var ErrBadArgument = errors.New("argument does not match its x-mcp-header type")

// HeaderValue renders the argument raw as its header carries it, before
// sentinel encoding: a string as itself, an integer as written, a boolean
// as true or false. present is false for an absent or null argument, whose
// header must be absent too.
func (p ParamHeader) HeaderValue(raw json.RawMessage) (value string, present bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	switch p.Type {
	case "string":
		if err := json.Unmarshal(raw, &value); err != nil {
			return "", true, ErrBadArgument
		}
	case "boolean":
		if s := string(raw); s != "true" && s != "false" {
			return "", true, ErrBadArgument
		}
		value = string(raw)
	default: // integer
		var n json.Number
		if c := raw[0]; c != '-' && (c < '0' || c > '9') || json.Unmarshal(raw, &n) != nil {
			return "", true, ErrBadArgument
		}
		value = n.String()
	}
	return value, true, nil
}
