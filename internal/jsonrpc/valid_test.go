package jsonrpc

import (
	"encoding/json"
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
func BenchmarkValid(b *testing.B) {
	inputs := map[string][]byte{
		"request": []byte(`{"jsonrpc":"2.0","id":17,"method":"resources/read","params":{"uri":"docs+test://docs/7","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`),
		"answer":  []byte(`{"jsonrpc":"2.0","id":17,"result":{"resultType":"complete","ttlMs":60000,"cacheScope":"public","contents":[{"uri":"docs+test://docs/7","mimeType":"text/plain","text":"` + strings.Repeat("lorem ipsum \\\"dolor\\\" sit amet ", 30) + `"}]}}`),
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
