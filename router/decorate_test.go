package router

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
)

// decorateByMaps is decorate as the full decode and encode it replaces:
// the result split into a map of members, edited, and written again. It is
// the reference the byte-level pass is held to.
func decorateByMaps(res json.RawMessage, cacheable bool) (json.RawMessage, error) {
	obj, err := jsonrpc.ParseObject(res)
	if err != nil {
		return nil, err
	}
	rt := obj.String("resultType")
	if rt == "" {
		rt = mcp.ResultTypeComplete
		_ = obj.Set("resultType", rt)
	}
	if rt == mcp.ResultTypeComplete && cacheable {
		if _, ok := obj["ttlMs"]; !ok {
			obj["ttlMs"] = json.RawMessage("0")
		}
		if s := obj.String("cacheScope"); s != mcp.ScopePublic {
			_ = obj.Set("cacheScope", mcp.ScopePrivate)
		}
	}
	meta, err := obj.Object("_meta")
	if err != nil {
		meta = jsonrpc.Object{}
	}
	_ = meta.Set(mcp.MetaServerInfo, mcp.ServerInfo)
	delete(meta, MetaCache)
	obj["_meta"] = meta.Marshal()
	return obj.Marshal(), nil
}

// The byte-level decorate gives every result what the full decode and
// encode gives it, as JSON values.
func FuzzDecorate(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"contents":[{"uri":"a","text":"b"}]}`, `{"resultType":"input_required","inputRequests":{}}`,
		`{"ttlMs":5,"cacheScope":"public","_meta":{"x":1}}`, `{"cacheScope":"Public"}`, `{"_meta":null}`, `{"_meta":[1]}`,
		`{"a":1,"a":2}`, `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"},"k":"v"}}`, `{"\u005fmeta":{"y":2}}`, `{"_meta":{"io.manifold/cache":{"tier":"memory"},"io.manifold\/cache":1,"z":3}}`,
		`{"resultType":"complete","ttlMs":1,"cacheScope":"private","tools":[]}`, ` { "content" : [ ] } `,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	r := New(Options{})
	f.Fuzz(func(t *testing.T, in []byte, cacheable bool) {
		if !json.Valid(in) {
			return
		}
		want, err := decorateByMaps(in, cacheable)
		got, gerr := r.decorate(in, cacheable, namespace.ItemsRewrite{})
		if (err == nil) != (gerr == nil) {
			t.Fatalf("%s: reference error %v, byte-level error %v", in, err, gerr)
		}
		if err != nil {
			return
		}
		var a, b any
		if json.Unmarshal(want, &a) != nil || json.Unmarshal(got, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s (cacheable %v):\nreference  %s\nbyte-level %s", in, cacheable, want, got)
		}
	})
}

// A read's result decorated and namespaced in one pass (decorate with the
// namespace's items rewrite) is, byte for byte, the result decorated and
// then namespaced (Namespace.Result), the two passes it replaces; the two
// fail alike.
func FuzzDecorateNamespaced(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"contents":[{"uri":"a","text":"b"}]}`, `{"contents":[ {"uri":"test://a","text":"b"} , {"text":"c","uri":"x:y","blob":""}],"ttlMs":5}`,
		`{"contents":null}`, `{"contents":[]}`, `{"contents":{}}`, `{"contents":[{"text":"no uri"}]}`, `{"contents":[{"uri":1}]}`,
		`{"contents":[{"uri":"a"}],"contents":[{"uri":"b"}]}`, `{"\u0063ontents":[{"\u0075ri":"e"}]}`, `{"_meta":{"k":1},"contents":[{"uri":"a","uri":"b"}]}`,
		`{"resultType":"input_required","inputRequests":{}}`, `{"contents":[{"uri":"a"}],"cacheScope":"public","_meta":null}`, ` { "contents" : [ { "uri" : "s p" } ] } `,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	ns := namespace.Namespace{Prefix: true}
	r := New(Options{Namespace: ns})
	read, _ := mcp.Lookup(mcp.MethodResourcesRead)
	it, ok := ns.Items("up", read)
	if !ok {
		f.Fatal("no items rewrite for resources/read")
	}
	f.Fuzz(func(t *testing.T, in []byte, cacheable bool) {
		if !json.Valid(in) {
			return
		}
		want, err := r.decorate(in, cacheable, namespace.ItemsRewrite{})
		if err == nil {
			want, err = ns.Result("up", mcp.MethodResourcesRead, want)
		}
		got, gerr := r.decorate(in, cacheable, it)
		if (err == nil) != (gerr == nil) {
			t.Fatalf("%s: two passes' error %v, one pass's %v", in, err, gerr)
		}
		if err == nil && !bytes.Equal(want, got) {
			t.Fatalf("%s (cacheable %v):\ntwo passes %s\none pass   %s", in, cacheable, want, got)
		}
	})
}

// decorate allocates its output and nothing else.
func TestDecorateAllocations(t *testing.T) {
	r := New(Options{})
	res := json.RawMessage(`{"contents":[{"uri":"test://a","text":"` + string(make([]byte, 0)) + `hello"}],"ttlMs":1000,"cacheScope":"public","_meta":{"k":"v"}}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = r.decorate(res, true, namespace.ItemsRewrite{}) }); n > 1 {
		t.Errorf("decorate made %v allocations per result, want 1 (its output)", n)
	}
}
