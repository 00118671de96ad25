package mcp

import (
	"mime"
	"testing"
)

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

// TestMediaType holds the shortcut for the exact types to mime's parse:
// the same media type for every form a peer may send, parameters, case
// and spaces included.
func TestMediaType(t *testing.T) {
	for _, v := range []string{
		"application/json", "text/event-stream", "application/json; charset=utf-8",
		"Application/JSON", "text/event-stream;charset=UTF-8", " application/json",
		"text/html", "application/json;", "", "application/", "not a type",
	} {
		want, _, _ := mime.ParseMediaType(v)
		if got := MediaType(v); got != want {
			t.Errorf("MediaType(%q) = %q, mime's parse %q", v, got, want)
		}
	}
	if got := MediaType("Application/JSON; charset=utf-8"); got != "application/json" {
		t.Errorf("a JSON type with parameters and capitals is %q, want application/json", got)
	}
}
