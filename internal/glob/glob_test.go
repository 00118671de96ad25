package glob

import (
	"path"
	"testing"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"docs_*", "docs_search", true},
		{"docs_*", "github_search", false},
		{"docs+file:///*", "docs+file:///guides/a.md", true}, // '*' crosses '/'
		{"docs+file:///guides/*", "docs+file:///secret/a.md", false},
		{"*_search", "docs_search", true},
		{"?ocs_x", "docs_x", true},
		{"?ocs_x", "ddocs_x", false},
		{"[dg]*", "github_a", true},
		{"[^dg]*", "github_a", false},
		{"[!dg]*", "wiki_a", true},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{`a\*b`, "a*b", true},
		{`a\*b`, "axb", false},
		{"a.b", "axb", false}, // regexp metacharacters are literal
		{"a(b", "a(b", true},
		{"[-]x", "-x", true},
		{"[a-]x", "-x", true},
		{"é*", "éa", true},
		{"?", "é", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"*", "", true},
		{"a*", "a\nb", true},
	}
	for _, c := range cases {
		g, err := Compile(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if got := g.Match(c.s); got != c.want {
			t.Errorf("%q matching %q: %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// Where path.Match and this package agree (no '/' in the name), they give
// the same answer: the upstreams' filters and the endpoints' read alike.
func TestAgreesWithPathMatchWithoutSlashes(t *testing.T) {
	patterns := []string{"docs_*", "*_search", "?ocs", "[a-c]*", "[^a-c]*", `\*x`, "*x*y*"}
	names := []string{"docs_search", "a_search", "docs", "bcd", "zed", "*x", "a-b", "axbyc", "", "xy"}
	for _, p := range patterns {
		g, err := Compile(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		for _, n := range names {
			want, _ := path.Match(p, n)
			if got := g.Match(n); got != want {
				t.Errorf("%q on %q: %v, path.Match says %v", p, n, got, want)
			}
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, p := range []string{"", "[", "[]", "[abc", `a\`, `[a\`, "[z-a]", string(make([]byte, MaxLen+1))} {
		if _, err := Compile(p); err == nil {
			t.Errorf("%q compiled", p)
		}
	}
}

func TestSet(t *testing.T) {
	s, err := NewSet([]string{"docs_*", "github_get_*"}, []string{"*_delete*"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"docs_search": true, "docs_delete_page": false, "github_get_issue": true, "github_create_issue": false} {
		if got := s.Admits(name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if !(Set{}).Admits("anything") || !(Set{}).Empty() {
		t.Error("the zero Set must admit everything")
	}
	if _, err := NewSet([]string{"ok", "[bad"}, nil); err == nil || err.Error() != `allow[1] "[bad": unterminated [ class` {
		t.Errorf("error %v", err)
	}
}
