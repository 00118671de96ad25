package frontend

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// legacyResultDecoded is what legacyResult did before it cut at byte
// level: a result with something modern in it (hadModern) was decoded into
// a map, its modern members and `_meta` keys deleted, and encoded again.
func legacyResultDecoded(raw json.RawMessage) json.RawMessage {
	if !hadModern(raw) {
		return raw
	}
	obj, err := jsonrpc.ParseObject(raw)
	if err != nil {
		return raw
	}
	for _, k := range modernOnly {
		delete(obj, k)
	}
	if meta, err := obj.Object("_meta"); err == nil {
		for k := range meta {
			if strings.HasPrefix(k, "io.modelcontextprotocol/") {
				delete(meta, k)
			}
		}
		if len(meta) == 0 {
			delete(obj, "_meta")
		} else {
			obj["_meta"] = meta.Marshal()
		}
	}
	return obj.Marshal()
}

// For any result an upstream can send (valid JSON: Decode checked it),
// legacyResult's answer decodes to what the decode-and-encode path gave.
func FuzzLegacyResult(f *testing.F) {
	for _, s := range []string{
		`{"resultType":"complete","ttlMs":60000,"cacheScope":"public","contents":[{"uri":"a://b","text":"hi"}]}`,
		`{"contents":[],"_meta":{"io.modelcontextprotocol/related":1,"x":2}}`,
		`{"_meta":{"io.modelcontextprotocol/only":true},"tools":[]}`,
		`{"tools":[],"nextCursor":"c"}`,
		`{"ttlMs":1,"ttlMs":2,"a":1,"a":{"b":2}}`,
		`{"resultTyp\u0065":"complete","requestState":"s","inputRequests":{}}`,
		`{"_meta":{"note":"io.modelcontextprotocol/ in a value"}}`,
		`{}`, `null`, ` { "a" : 1 , "cacheScope" : "private" } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		got, want := legacyResult(raw), legacyResultDecoded(raw)
		g, err := decodeNumbers(got)
		if err != nil {
			t.Fatalf("legacyResult(%s) = %s, not JSON: %v", raw, got, err)
		}
		if w, _ := decodeNumbers(want); !reflect.DeepEqual(g, w) {
			t.Fatalf("legacyResult(%s) = %s, decoded and encoded %s", raw, got, want)
		}
	})
}

func hadModern(raw json.RawMessage) bool {
	members, err := jsonrpc.Members(raw, nil)
	if err != nil {
		return true
	}
	for _, m := range members {
		for _, k := range modernOnly {
			if jsonrpc.KeyIs(m.Key, k) {
				return true
			}
		}
		if jsonrpc.KeyIs(m.Key, "_meta") && bytes.Contains(m.Value, []byte(`"io.modelcontextprotocol/`)) {
			return true
		}
	}
	return false
}

// decodeNumbers decodes b keeping numbers as written (any JSON number is
// valid, not only those a float64 holds).
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
