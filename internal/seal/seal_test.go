package seal

import (
	"bytes"
	"testing"
)

// A sealed value opens only for the owner, store key, secret and purpose
// it was sealed for: another caller's, the same bytes moved to another
// entry's key, another deployment's secret, or the other use's sealer
// (tokens against cache entries) do not open it, and an altered byte
// fails it.
func TestSealedValueOpensOnlyWhereSealed(t *testing.T) {
	s := New([]byte("secret-0123456789"), "manifold private entry ")
	sealed, err := s.Seal("fpA", "keyA", []byte("private answer"))
	if err != nil || bytes.Contains(sealed, []byte("private answer")) {
		t.Fatalf("seal: %v %q", err, sealed)
	}
	if v, err := s.Open("fpA", "keyA", sealed); err != nil || string(v) != "private answer" {
		t.Fatalf("open: %q %v", v, err)
	}
	for _, c := range [][2]string{{"fpB", "keyA"}, {"fpA", "keyB"}, {"", ""}} {
		if _, err := s.Open(c[0], c[1], sealed); err != ErrNotOpen {
			t.Errorf("opened as %v: %v", c, err)
		}
	}
	others := map[string]*Sealer{
		"another secret":  New([]byte("another-secret-0123"), "manifold private entry "),
		"another purpose": New([]byte("secret-0123456789"), "manifold-oauth-v1\x00"),
	}
	for name, o := range others {
		if _, err := o.Open("fpA", "keyA", sealed); err != ErrNotOpen {
			t.Errorf("opened with %s: %v", name, err)
		}
	}
	altered := bytes.Clone(sealed)
	altered[len(altered)-1] ^= 1
	if _, err := s.Open("fpA", "keyA", altered); err != ErrNotOpen {
		t.Errorf("altered value: %v", err)
	}
	if _, err := s.Open("fpA", "keyA", sealed[:4]); err != ErrNotOpen {
		t.Errorf("truncated value: %v", err)
	}
}

// Two seals of one value differ (a fresh nonce each), so equal tokens or
// answers cannot be told apart in the store.
func TestSealsOfOneValueDiffer(t *testing.T) {
	s := New([]byte("secret"), "p")
	a, _ := s.Seal("o", "k", []byte("v"))
	b, _ := s.Seal("o", "k", []byte("v"))
	if bytes.Equal(a, b) {
		t.Error("two seals of one value are equal")
	}
}
