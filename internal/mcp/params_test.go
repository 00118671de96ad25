package mcp

import (
	"encoding/json"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

func tool(props string) jsonrpc.Object {
	o, err := jsonrpc.ParseObject(json.RawMessage(`{"name":"t","inputSchema":{"type":"object","properties":` + props + `}}`))
	if err != nil {
		panic(err)
	}
	return o
}

// The validity rules of x-mcp-header (SEP-2243): a header token, on a
// string, integer or boolean, once per header name whatever its case.
func TestParamHeaderValidity(t *testing.T) {
	valid := map[string]int{
		`{}`:                      0,
		`{"q":{"type":"string"}}`: 0,
		`{"r":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},"b":{"type":"boolean","x-mcp-header":"Debug-Mode"}}`: 3,
	}
	for props, n := range valid {
		hs, err := ParamHeaders(tool(props))
		if err != nil || len(hs) != n {
			t.Errorf("%s: %v %v", props, hs, err)
		}
	}
	for _, props := range []string{
		`{"v":{"type":"string","x-mcp-header":""}}`,
		`{"v":{"type":"number","x-mcp-header":"V"}}`,
		`{"v":{"type":"object","x-mcp-header":"V"}}`,
		`{"v":{"type":"array","x-mcp-header":"V"}}`,
		`{"v":{"type":"null","x-mcp-header":"V"}}`,
		`{"v":{"x-mcp-header":"V"}}`,
		`{"v":{"type":"string","x-mcp-header":"My Region"}}`,
		`{"v":{"type":"string","x-mcp-header":"Region:Primary"}}`,
		`{"v":{"type":"string","x-mcp-header":"Région"}}`,
		`{"v":{"type":"string","x-mcp-header":"Region\t1"}}`,
		`{"v":{"type":"string","x-mcp-header":5}}`,
		`{"a":{"type":"string","x-mcp-header":"MyField"},"b":{"type":"string","x-mcp-header":"myfield"}}`,
	} {
		if _, err := ParamHeaders(tool(props)); err == nil {
			t.Errorf("%s accepted", props)
		}
	}
}

func TestParamHeaderValue(t *testing.T) {
	for _, c := range []struct {
		typ, raw, want string
		present, bad   bool
	}{
		{"string", `"eu west"`, "eu west", true, false},
		{"string", `null`, "", false, false},
		{"string", ``, "", false, false},
		{"string", `5`, "", true, true},
		{"integer", `42`, "42", true, false},
		{"integer", `-7`, "-7", true, false},
		{"integer", `"42"`, "", true, true},
		{"boolean", `true`, "true", true, false},
		{"boolean", `"true"`, "", true, true},
	} {
		v, present, err := ParamHeader{Type: c.typ}.HeaderValue(json.RawMessage(c.raw))
		if v != c.want || present != c.present || (err != nil) != c.bad {
			t.Errorf("%s %s: %q %v %v", c.typ, c.raw, v, present, err)
		}
	}
}

// Declares walks the capabilities a caller declared as decoding them
// would: a member of an object at each step, whatever its value.
func TestDeclares(t *testing.T) {
	for caps, want := range map[string][3]bool{ // sampling, elicitation, elicitation.url
		`{"sampling":{},"elicitation":{"url":{}}}`:            {true, true, true},
		`{"elicitation":{"form":{}}}`:                         {false, true, false},
		`{"elicitation":true}`:                                {false, true, false},
		`{"sampling":null,"\u0065licitation":{"\u0075rl":1}}`: {true, true, true},
		`[]`: {false, false, false},
		``:   {false, false, false},
	} {
		meta := jsonrpc.Object{}
		if caps != "" {
			meta[MetaClientCapabilities] = json.RawMessage(caps)
		}
		r := &Request{Meta: meta}
		got := [3]bool{r.Declares("sampling"), r.Declares("elicitation"), r.Declares("elicitation", "url")}
		if got != want {
			t.Errorf("%s: Declares %v, want %v", caps, got, want)
		}
	}
}
