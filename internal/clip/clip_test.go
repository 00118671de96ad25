package clip

import (
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer text", 8, "a longer…"},
		{"caf\u00e9s", 4, "caf…"}, // é is two bytes: never half of it
		{"\u00e9\u00e9", 1, "…"},
	} {
		got := Text(c.s, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Text(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
