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
