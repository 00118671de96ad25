package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		in   string
		code int64 // 0: valid
		id   string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":{}}`, 0, "1"},
		{`{"jsonrpc":"2.0","id":"x","method":"m"}`, 0, `"x"`},
		{`{"jsonrpc":"2.0","method":"n"}`, 0, ""},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, 0, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"m"`, CodeParseError, ""},
		{`[]`, CodeInvalidRequest, ""},
		{`7`, CodeInvalidRequest, ""},
		{`{"jsonrpc":"1.0","id":3,"method":"m"}`, CodeInvalidRequest, "3"},
		{`{"jsonrpc":"2.0","id":true,"method":"m"}`, CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1.5,"method":"m"}`, CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":2,"method":"m","params":[1]}`, CodeInvalidRequest, "2"},
		{`{"jsonrpc":"2.0","id":2}`, CodeInvalidRequest, "2"},
		{``, CodeInvalidRequest, ""},
	} {
		m, err := Decode([]byte(c.in))
		switch {
		case c.code == 0 && err != nil:
			t.Errorf("%s: %v", c.in, err)
		case c.code != 0 && (err == nil || err.Code != c.code):
			t.Errorf("%s: got %v, want code %d", c.in, err, c.code)
		case c.id != "" && (m == nil || string(m.ID) != c.id):
			t.Errorf("%s: id %v", c.in, m)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err == nil && m.IsRequest() {
			// Whatever decodes must re-encode as a valid response.
			out := AppendResult(nil, m.ID, []byte(`{}`))
			if _, err := Decode(out); err != nil {
				t.Fatalf("re-encoded response invalid: %s", out)
			}
		}
	})
}

// ParseObject splits exactly what encoding/json decodes.
func FuzzParseObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, ` { "a" : [1, {"b":"}"}] , "c\"d":"e\\"}`, `{"a":1,"a":2}`, `{"x":{"y":[true,false,null,-1.5e3]}}`, `{"\u00e9":"\ud83d\ude00"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(b, &want)
		got, err := ParseObject(b)
		if wantErr != nil || want == nil {
			return // not an object: ParseObject may refuse or accept null
		}
		if err != nil {
			t.Fatalf("ParseObject(%q): %v", b, err)
		}
		if len(got) != len(want) {
			t.Fatalf("ParseObject(%q) = %d members, want %d", b, len(got), len(want))
		}
		for k, v := range want {
			var a, c bytes.Buffer
			_ = json.Compact(&a, v)
			_ = json.Compact(&c, got[k])
			if a.String() != c.String() {
				t.Fatalf("member %q = %s, want %s", k, c.String(), a.String())
			}
		}
	})
}

// Arrays of objects split and join without encoding/json, and what is not
// touched keeps its bytes.
func TestObjectsRoundTrip(t *testing.T) {
	o, err := ParseObject([]byte(`{"b":[ {"x":1,"y":"<&>"} , {"z":[1,{"a":"]"}]} ],"a":"s","n":null}`))
	if err != nil {
		t.Fatal(err)
	}
	items, err := o.Objects("b")
	if err != nil || len(items) != 2 || string(items[0]["y"]) != `"<&>"` || string(items[1]["z"]) != `[1,{"a":"]"}]` {
		t.Fatalf("Objects: %v %v", items, err)
	}
	items[0]["x"] = json.RawMessage(`2`)
	o.SetObjects("b", items)
	want := `{"a":"s","b":[{"x":2,"y":"<&>"},{"z":[1,{"a":"]"}]}],"n":null}`
	if got := string(o.Marshal()); got != want {
		t.Errorf("Marshal:\n got %s\nwant %s", got, want)
	}
	if !json.Valid(o.Marshal()) {
		t.Error("not valid JSON")
	}
	for _, bad := range []string{`{"b":{"x":1}}`, `{"b":[1,2]}`, `{"b":"s"}`} {
		o, _ := ParseObject([]byte(bad))
		if _, err := o.Objects("b"); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	empty, _ := ParseObject([]byte(`{"b":[ ]}`))
	if items, err := empty.Objects("b"); err != nil || items == nil || len(items) != 0 {
		t.Errorf("empty array: %v %v", items, err)
	}
}

// The scanners agree with encoding/json on what they find, and a rewrite
// changes nothing but the field it rewrites.
func TestScanning(t *testing.T) {
	obj := []byte(` { "a" : 1, "items" : [ {"uri":"x://1","n":{"uri":"inner"}} , {"name":"two","uri":"x:\/\/2"} ], "z\u0041":"q" } `)
	if v, ok := Member(obj, "zA"); !ok || string(v) != `"q"` {
		t.Errorf("Member with an escaped key: %s %v", v, ok)
	}
	if _, ok := Member(obj, "uri"); ok {
		t.Error("Member found a nested key at the top level")
	}
	items, _ := Member(obj, "items")
	elems, err := Elements(items)
	if err != nil || len(elems) != 2 {
		t.Fatalf("Elements: %v %v", elems, err)
	}
	if s, ok := MemberString(elems[1], "uri"); !ok || s != "x://2" {
		t.Errorf("MemberString with an escape: %q", s)
	}
	out, err := PrefixItems(obj, "items", "uri", "up+")
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	_ = json.Unmarshal(out, &got)
	_ = json.Unmarshal([]byte(`{"a":1,"items":[{"uri":"up+x://1","n":{"uri":"inner"}},{"name":"two","uri":"up+x://2"}],"zA":"q"}`), &want)
	if !json.Valid(out) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("PrefixItems:\n got %s", out)
	}
	if _, err := PrefixItems([]byte(`{"items":[{"name":"x"}]}`), "items", "uri", "up+"); err == nil {
		t.Error("an item without the field was accepted")
	}
}

// Encode writes what json.Marshal writes (but for HTML escaping), for
// every kind of message.
func TestEncodeAsMarshal(t *testing.T) {
	for _, m := range []Message{
		{JSONRPC: Version, ID: json.RawMessage(`7`), Method: "tools/call", Params: json.RawMessage(`{"name":"a<b>&","arguments":{"x":[1,2]}}`)},
		{JSONRPC: Version, Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":"a"}`)},
		{JSONRPC: Version, ID: json.RawMessage(`"s-1"`), Result: json.RawMessage(`{}`)},
		{JSONRPC: Version, ID: json.RawMessage(`3`), Error: &Error{Code: CodeInvalidParams, Message: "bad \"x\"", Data: json.RawMessage(`{"uri":"u"}`)}},
		{JSONRPC: Version, ID: json.RawMessage(`1`), Method: "ping"},
	} {
		want, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		var got, exp any
		if err := json.Unmarshal(m.Encode(), &got); err != nil {
			t.Fatalf("Encode wrote invalid JSON %s: %v", m.Encode(), err)
		}
		_ = json.Unmarshal(want, &exp)
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("Encode: %s\nMarshal: %s", m.Encode(), want)
		}
	}
}

// The array scans stop on bytes that are not JSON, where they spun
// forever (FuzzFilterItems found it in FilterItems; the other two had the
// same loop).
func TestArrayScansStopOnInvalidInput(t *testing.T) {
	bad := json.RawMessage(`[_"name":"x"},1,`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := Elements(bad); err == nil {
			t.Error("Elements took an invalid array")
		}
		if err := EachElement(bad, func(json.RawMessage) error { return nil }); err == nil {
			t.Error("EachElement took an invalid array")
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an array scan spins on invalid input")
	}
}
