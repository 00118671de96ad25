package upstream

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// spliceRequest splits raw as the frontends do (Validate, a legacy
// session's modernRequest), then changes it as the router may: op picks
// the change (the name without its namespace, a member added or dropped,
// a progress token of Manifold's own).
func spliceRequest(raw []byte, op byte, name string) (*mcp.Request, bool) {
	params, err := jsonrpc.ParseObject(raw)
	if err != nil {
		return nil, false
	}
	meta, err := params.Object("_meta")
	if err != nil {
		return nil, false
	}
	delete(params, "_meta")
	switch op % 6 {
	case 1: // the name, or else the URI, without its namespace
		if _, ok := params["name"]; ok {
			params["name"] = jsonrpc.Quote(name)
		} else {
			params["uri"] = jsonrpc.Quote(name)
		}
	case 2:
		params["added"] = jsonrpc.Quote(name)
	case 3:
		delete(params, "arguments")
	case 4:
		meta[mcp.MetaProgressToken] = jsonrpc.Quote(name)
	case 5:
		meta[mcp.MetaClientCapabilities] = json.RawMessage(`{"sampling":{}}`)
		delete(meta, mcp.MetaProtocolVersion)
	}
	return &mcp.Request{Method: mcp.MethodToolsCall, Params: params, Meta: meta, Raw: raw}, true
}

var spliceSeeds = []string{
	`{"name":"up_echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`,
	` { "_meta" : { "progressToken" : 7 , "io.modelcontextprotocol/clientInfo":{"name":"c"}} , "name" : "a_b" , "arguments" : { "x" : [1, 2] } } `,
	`{"uri":"docs+test://d/1","_meta":{}}`,
	`{"uri":"docs+test://d/1","_meta":null}`,
	`{"name":"a","name":"b","arguments":{}}`,
	`{"n\u0061me":"a","arguments":{}}`,
	`{"name":"é","_meta":{"k\u00e9":1,"io.modelcontextprotocol/logLevel":"info"}}`,
	`{}`,
}

// The spliced params are the request the maps say, as encodeParams writes
// it: the same JSON value, for either era, whatever the router changed.
func FuzzSplice(f *testing.F) {
	for i, s := range spliceSeeds {
		f.Add([]byte(s), byte(i), "inner", i%2 == 0)
	}
	tr := &translator{info: json.RawMessage(`{"name":"manifold","version":"test"}`)}
	f.Fuzz(func(t *testing.T, raw []byte, op byte, name string, modern bool) {
		req, ok := spliceRequest(raw, op, name)
		if !ok {
			return
		}
		s := &session{Info: Info{Modern: modern}}
		got, spliced := tr.spliceParams(context.Background(), s, req)
		if !spliced {
			return
		}
		want := tr.encodeParams(context.Background(), s, req)
		var g, w any
		if !jsonrpc.Valid(got) || json.Unmarshal(got, &g) != nil {
			t.Fatalf("spliced params are not JSON: %s", got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatalf("encoded params: %v", err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("raw %s, op %d, modern %v:\nspliced %s\nencoded %s", raw, op%6, modern, got, want)
		}
	})
}

// What the frontends hand on is spliced, not encoded again: a modern
// caller's call, its name changed, and a legacy caller's, whose session
// supplied the modern `_meta` members the guide lacks.
func TestSpliceTakesTheCallersRequests(t *testing.T) {
	tr := &translator{info: json.RawMessage(`{"name":"manifold","version":"test"}`)}
	for i, raw := range spliceSeeds[:4] {
		for _, modern := range []bool{true, false} {
			req, _ := spliceRequest([]byte(raw), 1, "inner")
			if i == 1 {
				req.Meta[mcp.MetaProtocolVersion] = jsonrpc.Quote(mcp.Version)
			}
			if _, ok := tr.spliceParams(context.Background(), &session{Info: Info{Modern: modern}}, req); !ok {
				t.Errorf("%s (modern %v) was encoded again, not spliced", raw, modern)
			}
		}
	}
}
