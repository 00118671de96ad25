package uritemplate

import "testing"

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		tmpl, uri string
		want      bool
	}{
		{"file:///{path}", "file:///a.md", true},
		{"file:///{path}", "file:///a/b.md", false}, // a simple expansion encodes '/'
		{"file:///{+path}", "file:///a/b.md", true},
		{"test://template/{id}/data", "test://template/123/data", true},
		{"test://template/{id}/data", "test://template/123/other", false},
		{"https://x{/seg*}", "https://x/a/b", true},
		{"https://x/search{?q,lang}", "https://x/search?q=a&lang=en", true},
		{"https://x/search{?q}", "https://x/other?q=a", false},
		{"a.b{.ext}", "a.b.txt", true},
		{"doc{#frag}", "doc#sec", true},
		{"x+y://{a}", "x+y://z", true},
		{"lit(eral)*", "lit(eral)*", true},
	} {
		tm, err := Parse(c.tmpl)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.tmpl, err)
		}
		if got := tm.Match(c.uri); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.tmpl, c.uri, got, c.want)
		}
	}
	for _, bad := range []string{"a{b", "a}b", "a{}", "a{=x}", "a{b c}"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
