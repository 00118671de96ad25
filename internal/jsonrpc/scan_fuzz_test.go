package jsonrpc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// On valid JSON the scanners agree with encoding/json: Elements splits an
// array into what it decodes to, Member finds the value encoding/json
// keeps (the last of duplicate keys), and PrefixItems changes exactly the
// field it prefixes.
func FuzzScan(f *testing.F) {
	f.Add([]byte(`{"resources":[{"uri":"a:1","name":"x"},{"name":"y","uri":"b:\u0032"}],"nextCursor":"c"}`), "uri")
	f.Add([]byte(` [ 1 , "s" , {"a":[]} , null ] `), "a")
	f.Add([]byte(`{"uri":"first","uri":"last"}`), "uri")
	f.Fuzz(func(t *testing.T, raw []byte, key string) {
		if !json.Valid(raw) {
			return
		}
		var arr []json.RawMessage
		if json.Unmarshal(raw, &arr) == nil && arr != nil {
			got, err := Elements(raw)
			if err != nil || len(got) != len(arr) {
				t.Fatalf("Elements(%s) = %d, %v; want %d", raw, len(got), err, len(arr))
			}
			for i := range arr {
				if !sameJSON(got[i], arr[i]) {
					t.Fatalf("element %d: %s, want %s", i, got[i], arr[i])
				}
			}
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil || obj == nil || !ascii(key) {
			return // the keys looked up are ASCII names such as "uri"
		}
		want, has := obj[key]
		got, ok := Member(raw, key)
		if ok != has || has && !sameJSON(got, want) {
			t.Fatalf("Member(%s, %q) = %s, %v; want %s, %v", raw, key, got, ok, want, has)
		}
		var s string
		if !has || json.Unmarshal(want, &s) != nil {
			return
		}
		out, err := PrefixItems(json.RawMessage(`{"l":[`+string(raw)+`]}`), "l", key, "p+")
		if err != nil {
			t.Fatalf("PrefixItems on %s: %v", raw, err)
		}
		{
			var res struct{ L []map[string]json.RawMessage }
			if json.Unmarshal(out, &res) != nil || len(res.L) != 1 {
				t.Fatalf("PrefixItems made invalid JSON: %s", out)
			}
			var p string
			if json.Unmarshal(res.L[0][key], &p) != nil || p != "p+"+s {
				t.Fatalf("PrefixItems on %s: %q = %s, want %q", raw, key, res.L[0][key], "p+"+s)
			}
		}
	})
}

func sameJSON(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && x.String() == y.String()
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// skipStringByByte is skipString's rule written byte by byte, as it was:
// a backslash escapes the byte after it, and the first quote not escaped
// ends the string.
func skipStringByByte(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// For any bytes, and each quote in them as a string's start, skipString
// ends the string where the byte-by-byte rule does.
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b"`, `"a\\"b"`, `"\\\"\\"`, `"\`, `"abc`, `x"\n\\\\\"q"tail"`, `""`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := range b {
			if b[i] != '"' {
				continue
			}
			if got, want := skipString(b, i), skipStringByByte(b, i); got != want {
				t.Fatalf("skipString(%q, %d) = %d, byte by byte %d", b, i, got, want)
			}
		}
	})
}
