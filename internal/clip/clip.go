// Package clip bounds text that comes from a peer (an upstream's error
// message, a server's instructions, an authorization server's refusal)
// before Manifold shows or logs it: at most n bytes, cut on a whole
// character, with an ellipsis saying it was cut.
package clip

import "unicode/utf8"

// Text is s, at most n bytes of it (before the ellipsis), ending on a
// whole character.
func Text(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
