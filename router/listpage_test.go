package router

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
)

// The predicates the page tests filter with: an upstream filter that hides
// names with an "h", and a view that hides identities ending in "x".
func fuzzExposes(_, name string) bool { return !strings.Contains(name, "h") }
func fuzzShows(_, id string) bool     { return !strings.HasSuffix(id, "x") }

// pageByDecoding is an upstream's list page made what a merge reads, the
// way the byte-level passes replace: the page decoded whole with
// encoding/json, its items filtered (by the upstream's filter and, for
// tools, the validity of their x-mcp-header annotations), their identity
// prefixed with the upstream's name, filtered by the view, and encoded
// again.
func pageByDecoding(upstream string, m *mcp.Method, page []byte) (json.RawMessage, error) {
	var obj any
	if err := json.Unmarshal(page, &obj); err != nil || obj == nil {
		return page, err
	}
	members, ok := obj.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	raw, ok := members[m.Items]
	if !ok || raw == nil {
		return page, nil
	}
	items, ok := raw.([]any)
	if !ok {
		return nil, errors.New("not an array")
	}
	kept := []any{}
	for _, item := range items {
		keep, err := keepByDecoding(upstream, m, item)
		if err != nil {
			return nil, err
		}
		if keep {
			kept = append(kept, item)
		}
	}
	members[m.Items] = kept
	return json.Marshal(members)
}

// keepByDecoding decides on one decoded item, prefixing its identity.
func keepByDecoding(upstream string, m *mcp.Method, item any) (bool, error) {
	obj, isObj := item.(map[string]any)
	if m.ID == "name" {
		if !isObj {
			return false, errors.New("an item is not an object")
		}
		name, _ := obj["name"].(string)
		if !fuzzExposes(m.Name, name) {
			return false, nil
		}
		if m.Name == mcp.MethodToolsList {
			b, _ := json.Marshal(obj)
			tool, _ := jsonrpc.ParseObject(b)
			if _, err := mcp.ParamHeaders(tool); err != nil {
				return false, nil
			}
		}
	}
	id, ok := obj[m.ID].(string)
	if !ok {
		return false, errors.New("an item has no string " + m.ID)
	}
	sep := namespace.Separator
	if m.ID == "name" {
		sep = namespace.NameSeparator
	}
	obj[m.ID] = upstream + sep + id
	return fuzzShows(m.Name, obj[m.ID].(string)), nil
}

// pageByBytes is the same through the router's byte-level passes: shape,
// namespace, view.
func pageByBytes(r *Router, upstream string, m *mcp.Method, page []byte) (json.RawMessage, error) {
	res := json.RawMessage(page)
	var err error
	if m.ID == "name" {
		if res, err = r.shapePage(upstream, fuzzExposes, m, res); err != nil {
			return nil, err
		}
	}
	if res, err = r.ns.Result(upstream, m.Name, res); err != nil {
		return nil, err
	}
	return filterPage(m.Name, res, fuzzShows)
}

// Every list page, through the byte-level passes, is what the full decode
// and encode makes of it, as JSON values; and a page one refuses, so does
// the other.
func FuzzListPage(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `{"tools":null}`, `{"tools":{}}`, `{"tools":[1]}`, `{"tools":[],"nextCursor":"c"}`,
		`{"tools":[{"name":"a"},{"name":"hide"},{"name":"b","inputSchema":{"type":"object","properties":{"q":{"type":"string","x-mcp-header":"Q"}}}}]}`,
		`{"tools":[{"name":"bad","inputSchema":{"properties":{"q":{"type":"object","x-mcp-\u0068eader":"Q"}}}},{"name":"x"}],"ttlMs":5}`,
		`{"resources":[{"uri":"test://a"},{"uri":"test://x"},{"uri":"test://b","name":"h"}],"cacheScope":"public"}`,
		`{"resources":[{"uri":"test://a","uri":"test://ax"}],"resources":[{"uri":"u:x"},{"uri":"u:y"}]}`,
		`{"resourceTemplates":[{"uriTemplate":"file:///{p}"},{"name":"no template"}]}`,
		` { "prompts" : [ { "name" : "p" } , { "name" : "hp" } , { "n\u0061me" : "q" } ] } `,
		`{"prompts":[{"name":"\u00e9x"},{"name":"ok"}]}`,
	} {
		for m := range 4 {
			f.Add([]byte(s), m)
		}
	}
	lists := []string{mcp.MethodResourcesList, mcp.MethodTemplatesList, mcp.MethodToolsList, mcp.MethodPromptsList}
	r := New(Options{Namespace: namespace.Namespace{Prefix: true}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Fuzz(func(t *testing.T, page []byte, which int) {
		if !json.Valid(page) {
			return // an upstream's answer passed jsonrpc.Decode
		}
		m, _ := mcp.Lookup(lists[(which%len(lists)+len(lists))%len(lists)])
		want, werr := pageByDecoding("up", m, page)
		got, gerr := pageByBytes(r, "up", m, page)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s of %s: decoding says %v, the byte-level passes %v", page, m.Name, werr, gerr)
		}
		if werr != nil {
			return
		}
		var a, b any
		if json.Unmarshal(want, &a) != nil || json.Unmarshal(got, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s of %s:\ndecoding   %s\nbyte-level %s", page, m.Name, want, got)
		}
	})
}

// A page that loses nothing to the upstream's filter or the view is
// passed on as it is: no item is decoded and nothing is copied; each
// item's identity is the one string made of it (for the filter or the
// view), and a page that loses an item is one new buffer.
func TestListPageKeptWholeIsNotCopied(t *testing.T) {
	r := New(Options{Namespace: namespace.Namespace{Prefix: true}})
	var b strings.Builder
	b.WriteString(`{"tools":[`)
	for i := range 20 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"name":"tool` + string(rune('a'+i)) + `","description":"a tool","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}`)
	}
	b.WriteString(`],"ttlMs":60000,"cacheScope":"public"}`)
	page := json.RawMessage(b.String())
	m, _ := mcp.Lookup(mcp.MethodToolsList)
	all := func(string, string) bool { return true }
	if n := testing.AllocsPerRun(100, func() { _, _ = r.shapePage("up", all, m, page) }); n > 20 {
		t.Errorf("shaping a page of 20 tools made %v allocations, want at most 20 (the names)", n)
	}
	if got, _ := r.shapePage("up", all, m, page); &got[0] != &page[0] || len(got) != len(page) {
		t.Errorf("shaping a page that loses nothing copied it")
	}
	if got, _ := filterPage(m.Name, page, all); &got[0] != &page[0] || len(got) != len(page) {
		t.Errorf("a view that keeps every tool copied the page")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = filterPage(m.Name, page, all) }); n > 20 {
		t.Errorf("a view that keeps every tool made %v allocations, want at most 20 (the names)", n)
	}
	hideOne := func(_, name string) bool { return name != "up_toolc" && name != "toolc" }
	if n := testing.AllocsPerRun(100, func() { _, _ = filterPage(m.Name, page, hideOne) }); n > 21 {
		t.Errorf("a view that hides one tool made %v allocations, want at most 21 (the names and the new page)", n)
	}
}
