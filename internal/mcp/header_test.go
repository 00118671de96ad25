package mcp

import "testing"

func TestHeaderEncoding(t *testing.T) {
	for _, c := range []struct {
		in      string
		encoded bool
	}{
		{"resources/read", false},
		{"test://static-text", false},
		{"file:///caf\u00e9.md", true},
		{" leading", true},
		{"trailing ", true},
		{"line\nbreak", true},
		{"=?base64?SGVsbG8=?=", true}, // looks like the sentinel itself
		{"", false},
	} {
		enc := EncodeHeader(c.in)
		if (enc != c.in) != c.encoded {
			t.Errorf("EncodeHeader(%q) = %q", c.in, enc)
		}
		dec, err := DecodeHeader(enc)
		if err != nil || dec != c.in {
			t.Errorf("round trip of %q: %q, %v", c.in, dec, err)
		}
	}
	for _, bad := range []string{"=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?="} {
		if _, err := DecodeHeader(bad); err == nil {
			t.Errorf("DecodeHeader(%q) accepted", bad)
		}
	}
	// Not quite the sentinel: taken literally.
	if v, err := DecodeHeader("=?base64?SGVsbG8="); err != nil || v != "=?base64?SGVsbG8=" {
		t.Errorf("literal value changed: %q %v", v, err)
	}
}
