package merge

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCursorSealed(t *testing.T) {
	k := NewCodec([]byte("secret-secret-secret"), time.Hour)
	s, err := k.Encode(Cursor{Method: "resources/list", Pending: map[string]string{"a": "x", "b": ""}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Decode(s, "resources/list")
	if err != nil || c.Pending["a"] != "x" || len(c.Pending) != 2 {
		t.Fatalf("round trip: %+v %v", c, err)
	}
	if _, err := k.Decode(s, "resources/templates/list"); !errors.Is(err, ErrBadCursor) {
		t.Errorf("cursor accepted for another method: %v", err)
	}
	other := NewCodec([]byte("another-secret-here"), time.Hour)
	if _, err := other.Decode(s, "resources/list"); !errors.Is(err, ErrBadCursor) {
		t.Errorf("cursor accepted under another secret: %v", err)
	}
	for i := range len(s) {
		b := []byte(s)
		b[i] ^= 0x01
		if _, err := k.Decode(string(b), "resources/list"); err == nil && string(b) != s {
			t.Fatalf("a cursor with byte %d changed was accepted", i)
		}
	}
	if _, err := k.Decode(strings.Repeat("a", maxCursorLen+1), "resources/list"); !errors.Is(err, ErrBadCursor) {
		t.Error("oversized cursor accepted")
	}
	k.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := k.Decode(s, "resources/list"); !errors.Is(err, ErrStaleCursor) {
		t.Errorf("old cursor: %v", err)
	}
}
