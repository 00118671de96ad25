package namespace

import (
	"regexp"
	"strings"
	"testing"
)

// upstreamName is config's rule for upstream names.
var upstreamName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// Join and Split are inverses: a joined URI or name splits back into its
// parts, and whatever splits joins back to the same string.
func FuzzSplitJoin(f *testing.F) {
	f.Add("docs", "file:///a.md", "search", "docs+file:///a.md")
	f.Add("a-1", "x+y:z", "a_b", "b_c")
	f.Add("n", "urn:isbn:1", "", "+:")
	f.Fuzz(func(t *testing.T, upstream, uri, name, merged string) {
		n := Namespace{Prefix: true}
		if up, inner, ok := n.Split(merged); ok && n.Join(up, inner) != merged {
			t.Fatalf("Split(%q) = %q, %q; joined back %q", merged, up, inner, n.Join(up, inner))
		}
		if up, inner, ok := n.SplitName(merged); ok && n.JoinName(up, inner) != merged {
			t.Fatalf("SplitName(%q) = %q, %q; joined back %q", merged, up, inner, n.JoinName(up, inner))
		}
		if !upstreamName.MatchString(upstream) {
			return
		}
		if strings.Contains(uri, ":") {
			if up, inner, ok := n.Split(n.Join(upstream, uri)); !ok || up != upstream || inner != uri {
				t.Fatalf("Split(Join(%q, %q)) = %q, %q, %v", upstream, uri, up, inner, ok)
			}
		}
		if name != "" {
			if up, inner, ok := n.SplitName(n.JoinName(upstream, name)); !ok || up != upstream || inner != name {
				t.Fatalf("SplitName(JoinName(%q, %q)) = %q, %q, %v", upstream, name, up, inner, ok)
			}
		}
	})
}
