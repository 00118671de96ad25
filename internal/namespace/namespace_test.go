package namespace

import (
	"strings"
	"testing"
)

func TestSplitJoin(t *testing.T) {
	ns := Namespace{Prefix: true}
	for _, c := range []struct{ upstream, uri string }{
		{"docs", "file:///a.md"},
		{"git", "git+ssh://host/repo"}, // the scheme has its own '+'
		{"x-1", "test://static-text"},
		{"a", "urn:isbn:0451450523"},
	} {
		joined := ns.Join(c.upstream, c.uri)
		up, inner, ok := ns.Split(joined)
		if !ok || up != c.upstream || inner != c.uri {
			t.Errorf("Split(%q) = %q %q %v", joined, up, inner, ok)
		}
	}
	for _, bad := range []string{"file:///a.md", "+file:///a", "noscheme", "docs+nocolon", "/rel+x:y"} {
		if up, _, ok := ns.Split(bad); ok && !strings.Contains(bad, up+"+") {
			t.Errorf("Split(%q) accepted", bad)
		}
	}
	if up, _, ok := ns.Split("file:///a+b.md"); ok {
		t.Errorf("a '+' after the scheme is not a prefix: got %q", up)
	}
}

func TestResultRewritesOnlyURIs(t *testing.T) {
	ns := Namespace{Prefix: true}
	in := `{"resources":[{"uri":"file:///a","name":"a","icons":[{"src":"https://x/i.png"}],"_meta":{"k":1}}],"nextCursor":"c","ttlMs":5}`
	out, err := ns.Result("docs", "resources/list", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"uri":"docs+file:///a"`, `"name":"a"`, `"src":"https://x/i.png"`, `"_meta":{"k":1}`, `"nextCursor":"c"`, `"ttlMs":5`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s lacks %s", out, want)
		}
	}
	if _, err := ns.Result("docs", "resources/read", []byte(`{"contents":[{"text":"no uri"}]}`)); err == nil {
		t.Error("a content without uri was accepted")
	}
	same, _ := Namespace{}.Result("docs", "resources/list", []byte(in))
	if string(same) != in {
		t.Errorf("none mode changed the result: %s", same)
	}
}

func TestNames(t *testing.T) {
	ns := Namespace{Prefix: true}
	if got := ns.JoinName("docs", "search_all"); got != "docs_search_all" {
		t.Errorf("JoinName: %q", got)
	}
	// The first '_' splits: upstream names cannot contain one.
	if up, inner, ok := ns.SplitName("docs_search_all"); !ok || up != "docs" || inner != "search_all" {
		t.Errorf("SplitName: %q %q %v", up, inner, ok)
	}
	for _, bad := range []string{"search", "_search", "docs_", ""} {
		if _, _, ok := ns.SplitName(bad); ok {
			t.Errorf("SplitName(%q) accepted", bad)
		}
	}
	if _, inner, ok := (Namespace{}).SplitName("a_b"); ok || inner != "a_b" {
		t.Error("none mode split a name")
	}
}

// Resource links and embedded resources in tool results and prompt
// messages are namespaced, at any position; nothing else is touched, and a
// result without them comes back byte for byte.
func TestResultBlocks(t *testing.T) {
	ns := Namespace{Prefix: true}
	call := `{"content":[{"type":"text","text":"a resource"},{"type":"resource_link","uri":"file:///a","name":"a"},` +
		`{"type":"resource","resource":{"uri":"file:///b","text":"b"}}],"structuredContent":{"uri":"file:///a"},"isError":false}`
	out, err := ns.Result("docs", "tools/call", []byte(call))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"a","type":"resource_link","uri":"docs+file:///a"`, `"resource":{"text":"b","uri":"docs+file:///b"}`, `"structuredContent":{"uri":"file:///a"}`, `"text":"a resource"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s lacks %s", out, want)
		}
	}
	prompt := `{"messages":[{"role":"user","content":{"type":"resource_link","uri":"x://y","name":"y"}},{"role":"user","content":{"type":"text","text":"hi"}}]}`
	out, err = ns.Result("up", "prompts/get", []byte(prompt))
	if err != nil || !strings.Contains(string(out), `"uri":"up+x://y"`) {
		t.Errorf("prompt message: %s %v", out, err)
	}
	plain := `{"content":[{"type":"text","text":"nothing to see"}], "isError" : false}`
	if out, _ := ns.Result("up", "tools/call", []byte(plain)); string(out) != plain {
		t.Errorf("a result without links was rewritten: %s", out)
	}
	list := `{"tools":[{"name":"search","inputSchema":{"type":"object"}}]}`
	if out, _ := ns.Result("up", "tools/list", []byte(list)); !strings.Contains(string(out), `"name":"up_search"`) {
		t.Errorf("tools/list: %s", out)
	}
}
