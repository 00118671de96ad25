package mcp

import "testing"

func TestNormalizeURI(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"file:///a.txt", "file:///a.txt"},
		{"file:/a.txt", "file:///a.txt"},
		{"file:///%61.txt", "file:///a.txt"},
		{"file://localhost/a.txt", "file:///a.txt"},
		{"FILE:///a.txt", "file:///a.txt"},
		{"files+file:/a.txt", "files+file:///a.txt"},
		{"HTTPS://Example.COM/A/%7euser/./b/../c?q=%2f#F", "https://example.com/A/~user/c?q=%2F#F"},
		{"https://User@Example.com/", "https://User@example.com/"},
		{"test://doc", "test://doc"},
		{"test://%64oc", "test://doc"},
		{"urn:isbn:0451450523", "urn:isbn:0451450523"},
		{"test://x/a%2Fb", "test://x/a%2Fb"},
		{"test://x/a%2fb", "test://x/a%2Fb"},
		{"test://x/%zz", "test://x/%25zz"}, // a bare '%' stands for itself
		{"test://x/%7%41", "test://x/%257A"},
		{"test://x/a/../../b", "test://x/b"},
		{"a:/.//b", "a:/.//b"}, // not a://b: that b would be a host
		{"noscheme", "noscheme"},
		{"test://doc:/a", "test://doc/a"}, // an empty port is no port
		{"test://doc:", "test://doc"},
		{"test://u:@doc:8080/", "test://u:@doc:8080/"},
	} {
		if got := NormalizeURI(c.in); got != c.want {
			t.Errorf("NormalizeURI(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := NormalizeURI(NormalizeURI(c.in)); again != NormalizeURI(c.in) {
			t.Errorf("not idempotent on %q: %q", c.in, again)
		}
	}
}

// Case is folded in ASCII only: the Kelvin sign (U+212A) lowercases to 'k'
// in Unicode, but an upstream tells the two hosts apart, so must the cache.
// What has no valid scheme is not a URI and is left alone.
func TestNormalizeURIASCIIOnly(t *testing.T) {
	if a, b := NormalizeURI("test://\u212A/doc"), NormalizeURI("test://k/doc"); a == b {
		t.Errorf("two hosts share the key %q", a)
	}
	if got := NormalizeURI("\u212Aile:///a"); got != "\u212Aile:///a" {
		t.Errorf("a non-URI was rewritten to %q", got)
	}
}

func TestURITag(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"test://doc#part", "test://doc"},
		{"TEST://doc:/a#x", "test://doc/a"},
		{"test://doc?q=1#x", "test://doc?q=1"},
		{"urn:x", "urn:x"},
	} {
		if got := URITag(c.in); got != c.want {
			t.Errorf("URITag(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
