package jsonrpc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Valid gives encoding/json's verdict on every input.
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `1E-2`, `true`, `false`, `null`, ` {"a" : [1, 2.0, {"b":null}] } `,
		`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a\u00e9\n\"\\\/"}}`,
		`01`, `1.`, `.1`, `-`, `1e`, `1e+`, `+1`, `{"a":1,}`, `[1,]`, `{"a"}`, `{a:1}`, `"\x"`, `"\u12"`, `"\u12G4"`,
		"\"a\x01\"", "\"\xff\xfe\"", `tru`, `nul`, `[1 2]`, `{"a":1 "b":2}`, `1 2`, "\t\n\r 1 \t", ``, ` `, `[`, `{"`, `"abc`,
		`[[[[[[[[[[]]]]]]]]]]`, `{"a":{"b":{"c":[]}}}`, `1.0e10`, `-0.0E-0`, `00`, `-01`, `1.e3`, `[-]`, `"\/"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if got, want := Valid(in), json.Valid(in); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", in, got, want)
		}
	})
}

// Nesting is bounded where encoding/json bounds it.
func TestValidNestingBound(t *testing.T) {
	for _, depth := range []int{maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closeBy := map[string]string{"[": "]", `{"a":`: "}"}[open]
			in := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(closeBy, depth))
			if got, want := Valid(in), json.Valid(in); got != want {
				t.Errorf("%d deep %q: Valid %v, encoding/json %v", depth, open, got, want)
			}
		}
	}
}

// A request and a 1 KiB answer, checked by Valid and by encoding/json.
// textAnswer is a read's answer whose text is 1 KiB of prose, one escape
// a line.
var textAnswer = []byte(`{"jsonrpc":"2.0","id":17,"result":{"contents":[{"uri":"docs+test://docs/7","mimeType":"text/markdown","text":"` + strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.\\n", 14) + `"}]}}`)

func BenchmarkValid(b *testing.B) {
	inputs := map[string][]byte{
		"request": []byte(`{"jsonrpc":"2.0","id":17,"method":"resources/read","params":{"uri":"docs+test://docs/7","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`),
		"answer":  []byte(`{"jsonrpc":"2.0","id":17,"result":{"resultType":"complete","ttlMs":60000,"cacheScope":"public","contents":[{"uri":"docs+test://docs/7","mimeType":"text/plain","text":"` + strings.Repeat("lorem ipsum \\\"dolor\\\" sit amet ", 30) + `"}]}}`),
		"text":    textAnswer,
	}
	for name, in := range inputs {
		b.Run(name+"/jsonrpc", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				Valid(in)
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				json.Valid(in)
			}
		})
	}
}

// Decode checks and splits a message in one pass: its verdict is
// encoding/json's (-32700 exactly when json.Valid refuses the body), and
// what it splits, the params and their `_meta` included, is what
// encoding/json decodes and a split of the checked bytes gives.
func FuzzDecodeSplits(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a_b","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"m","params":{"_meta":{"a":1},"_meta":null},"params":{"_meta":{"b":2}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1}},"params":{"n":1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1},"_meta":null}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`, `{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":"x"}}`, `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,}}`,
		`{"p\u0061rams":{"_meta":{}},"id":null}`, ` [{}] `, `"x"`, `{"a":1} x`, `{"id":1,"id":"\u00e9"}`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, e := Decode(in)
		data := bytes.TrimSpace(in)
		if invalid := len(data) > 0 && !json.Valid(data); invalid != (e != nil && e.Code == CodeParseError) {
			t.Fatalf("Decode(%q): %v; json.Valid says %v", in, e, !invalid)
		}
		var whole map[string]json.RawMessage
		if m == nil || json.Unmarshal(data, &whole) != nil {
			return
		}
		if !sameMember(m.Params, whole["params"]) || e == nil && !sameMember(m.Result, whole["result"]) {
			t.Fatalf("Decode(%q): params %s, result %s; encoding/json %s, %s", in, m.Params, m.Result, whole["params"], whole["result"])
		}
		if e != nil {
			return
		}
		wantParams, err := split(m.Params)
		if err != nil {
			return
		}
		wantMeta, metaErr := wantParams.Object("_meta")
		delete(wantParams, "_meta")
		params, meta, rpcErr := m.RequestParams()
		if (rpcErr != nil) != (metaErr != nil) || rpcErr == nil && (!reflect.DeepEqual(params, wantParams) || !reflect.DeepEqual(meta, wantMeta)) {
			t.Fatalf("Decode(%q).RequestParams() = %v, %v, %v; a split gives %v, %v, %v", in, params, meta, rpcErr, wantParams, wantMeta, metaErr)
		}
		again, _ := m.ParamsObject()
		if want, _ := split(m.Params); !reflect.DeepEqual(again, want) {
			t.Fatalf("a second ParamsObject of %q: %v, want %v", in, again, want)
		}
	})
}

func sameMember(a, b []byte) bool { return len(a) == 0 && len(b) == 0 || sameJSON(a, b) }

// A modern request taken as a frontend takes it: checked, split, its
// params and their `_meta` split.
func BenchmarkDecodeRequest(b *testing.B) {
	in := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"docs_search","arguments":{"query":"lorem ipsum","limit":10},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
	b.ReportAllocs()
	for b.Loop() {
		m, _ := Decode(in)
		_, _, _ = m.RequestParams()
	}
}

// A frontend that validated a request keeps it for every other request
// that differs from it only by a plain id (IDSpan): so the id of any
// message that Decode took, replaced by any plain id, makes a message
// Decode takes alike, with that id, whose IDSpan is the new id's place.
func FuzzIDSpan(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a+b://c"}}`,
		`{"id":"x","jsonrpc":"2.0","method":"m"}`, `{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`,
		`{"jsonrpc":"2.0","\u0069d":7,"method":"m","params":{"id":3}}`, `{"jsonrpc":"2.0","id":01,"method":"m"}`,
		`{"jsonrpc":"2.0", "id" : "a\"b" ,"method":"m"}`, `{"id":1`, `{"id":`, `x`,
	} {
		f.Add([]byte(s), "42")
		f.Add([]byte(s), `"req-7"`)
	}
	f.Fuzz(func(t *testing.T, in []byte, id string) {
		start, end, ok := IDSpan(in)
		if !ok || !plainID([]byte(id)) {
			return
		}
		m, e := Decode(in)
		if e != nil || !bytes.Equal(m.ID, in[start:end]) {
			return // a frontend keeps nothing of this one
		}
		other := append(append(append([]byte{}, in[:start]...), id...), in[end:]...)
		s2, e2, ok := IDSpan(other)
		if !ok || s2 != start || e2 != start+len(id) {
			t.Fatalf("IDSpan(%q) = %d, %d, %v; want %d, %d", other, s2, e2, ok, start, start+len(id))
		}
		m2, e2rr := Decode(other)
		if e2rr != nil || string(m2.ID) != id || m2.Method != m.Method || !bytes.Equal(m2.Params, m.Params) {
			t.Fatalf("Decode(%q) = %+v, %v; want id %s and the rest of Decode(%q)", other, m2, e2rr, id, in)
		}
	})
}

// BenchmarkIDSpan is the id found in a modern read as a frontend takes it,
// to tell its shape.
func BenchmarkIDSpan(b *testing.B) {
	req := []byte(`{"jsonrpc":"2.0","id":17,"method":"resources/read","params":{"uri":"notes+file:///welcome.md","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	for b.Loop() {
		if _, _, ok := IDSpan(req); !ok {
			b.Fatal("no id")
		}
	}
}

// Strings long enough for plainRun's eight-byte steps, with what ends a
// plain run (a control character, a quote, a backslash escape, a bad
// escape) at every offset of a word, and bytes of UTF-8 about them: the
// verdict is encoding/json's.
func TestValidLongStrings(t *testing.T) {
	for _, odd := range []string{"\x01", "\x1f", "\x00", `\"`, `\\`, `\n`, `\u00e9`, `\x`, `"`, "é", "\x7f", "\xff", " "} {
		for at := range 20 {
			s := `"` + strings.Repeat("a", at) + odd + strings.Repeat("ß", 7) + `"`
			if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
				t.Errorf("Valid(%q) = %v, encoding/json says %v", s, got, want)
			}
		}
	}
}

// skipValue over an answer whose text is most of it: what each byte-level
// pass (namespacing, decorating) spends to step over the text.
func BenchmarkSkipValue(b *testing.B) {
	b.SetBytes(int64(len(textAnswer)))
	for b.Loop() {
		skipValue(textAnswer, 0)
	}
}
