package merge

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/manifold-mcp/manifold/internal/mcp"
)

// parsePage, which reads a page in one pass over its bytes, gives what a
// full decode of the page with encoding/json gives: the same items, next
// cursor and cache hints, and an error for the same pages.
func FuzzParsePage(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `[]`, `3`, `{"resources":null}`, `{"resources":{}}`, `{"resources":[{"uri":"a"}],"nextCursor":"c","ttlMs":5,"cacheScope":"private"}`,
		`{"tools":[1,2],"tools":[3]}`, `{"t\u006fols":[{"name":"x"}]}`, `{"ttlMs":"5"}`, `{"ttlMs":1e400}`, `{"ttlMs":-3.5}`, `{"ttlMs":null,"nextCursor":null}`,
		`{"nextCursor":5}`, `{"nextCursor":"\ud800x"}`, `{"resultType":"input_required"}`, `{"resultType":7,"cacheScope":["public"]}`,
		` { "prompts" : [ { "name" : "p" } ] , "cacheScope" : "PUBLIC" } `,
	} {
		f.Add([]byte(s), 0)
	}
	lists := []string{"resources", "resourceTemplates", "tools", "prompts"}
	f.Fuzz(func(t *testing.T, raw []byte, which int) {
		if !json.Valid(raw) {
			return // a Fetcher's page passed jsonrpc.Decode
		}
		list := lists[(which%len(lists)+len(lists))%len(lists)]
		want, werr := parseByDecoding(raw, list)
		got, gerr := parsePage(raw, list)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s: decoding says %v, the scanner %v", raw, werr, gerr)
		}
		if werr != nil {
			return
		}
		var a, b any
		_ = json.Unmarshal(orNull(want.items), &a)
		_ = json.Unmarshal(orNull(got.items), &b)
		if !reflect.DeepEqual(a, b) || want.next != got.next || want.ttlMs != got.ttlMs || want.scope != got.scope || want.resultType != got.resultType {
			t.Fatalf("%s:\ndecoding %+v\nscanner  %+v", raw, want, got)
		}
	})
}

func orNull(b []byte) []byte {
	if b == nil {
		return []byte("null")
	}
	return b
}

// parseByDecoding is what parsePage must give, read with encoding/json.
func parseByDecoding(raw []byte, list string) (page, error) {
	var p page
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return p, err
	}
	if items, ok := obj[list]; ok && string(items) != "null" {
		var arr []json.RawMessage
		if err := json.Unmarshal(items, &arr); err != nil {
			return p, err
		}
		p.items = items
	}
	var hints struct {
		Next       string
		ResultType string
		Scope      string
	}
	var ttl float64
	for key, dst := range map[string]any{"ttlMs": &ttl, "nextCursor": &hints.Next} {
		if v, ok := obj[key]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return p, err
			}
		}
	}
	_ = json.Unmarshal(obj["resultType"], &hints.ResultType) // not a string: ""
	_ = json.Unmarshal(obj["cacheScope"], &hints.Scope)
	if len(hints.Next) > MaxUpstreamCursor {
		return p, errTooLong
	}
	p.next, p.resultType = hints.Next, hints.ResultType
	p.ttlMs, p.scope = mcp.NormalizeTTL(ttl), mcp.NormalizeScope(hints.Scope)
	return p, nil
}

var errTooLong = json.Unmarshal([]byte("x"), new(any))

// A page is read without a map, a decoded item or a copy: reading one
// allocates its next cursor and nothing else.
func TestParsePageAllocations(t *testing.T) {
	raw := json.RawMessage(`{"resources":[{"uri":"a+test://1","name":"one"},{"uri":"a+test://2","name":"two"}],"nextCursor":"next-page","ttlMs":60000,"cacheScope":"public","resultType":"complete"}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = parsePage(raw, "resources") }); n > 1 {
		t.Errorf("parsePage made %v allocations per page, want 1 (its next cursor)", n)
	}
}
