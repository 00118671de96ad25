package mcp

import (
	"strings"
	"testing"
)

// Normalizing is idempotent, keeps what is not a URI as it is, maps
// and maps spellings that differ only by the case of the scheme to one key.
func FuzzNormalizeURI(f *testing.F) {
	for _, s := range []string{"file:///a/./b/../c.txt", "FILE://LocalHost/%61%2f", "test://\u212A/doc", "test://Host:80/%7e?q=%41#F", "urn:x:%zz", "a+file:/x", "no-scheme", "x://[::1]/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		if alreadyNormal(uri) && normalize(uri) != uri {
			t.Fatalf("%q was taken for normal, but normalizes to %q", uri, normalize(uri))
		}
		n := NormalizeURI(uri)
		if again := NormalizeURI(n); again != n {
			t.Fatalf("NormalizeURI(%q) = %q, then %q", uri, n, again)
		}
		scheme, rest, ok := strings.Cut(uri, ":")
		if !ok || !validScheme(scheme) {
			if n != uri {
				t.Fatalf("not a URI, yet %q became %q", uri, n)
			}
			return
		}
		if other := NormalizeURI(strings.ToUpper(scheme) + ":" + rest); other != n {
			t.Fatalf("scheme case changed the key: %q vs %q", n, other)
		}
	})
}
