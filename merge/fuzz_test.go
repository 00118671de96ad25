package merge

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// A cursor the codec sealed opens to what was sealed, for any upstream
// names and upstream cursors; changing any byte of it, or presenting any
// other string, is refused as invalid (never a panic, never another error).
func FuzzCursor(f *testing.F) {
	f.Add(0, "docs", "opaque-1", "notes", "", "garbage.x", 3)
	f.Add(3, "a", "\x00\xff", "b", "{\"json\":1}", "eyJtIjoidG9vbHMvbGlzdCJ9.AAAA", 0)
	methods := []string{"resources/list", "resources/templates/list", "tools/list", "prompts/list"}
	f.Fuzz(func(t *testing.T, m int, up1, cur1, up2, cur2, other string, flip int) {
		method := methods[(m%len(methods)+len(methods))%len(methods)]
		k := NewCodec([]byte("fuzz-secret-0123456789"), time.Hour)
		if _, err := k.Decode(other, method); err != nil && !errors.Is(err, ErrBadCursor) && !errors.Is(err, ErrStaleCursor) {
			t.Fatalf("Decode(%q): unexpected error %v", other, err)
		}
		// Upstream cursors reach the codec decoded from JSON, so valid UTF-8.
		in := Cursor{Method: method, Pending: validUTF8(map[string]string{up1: cur1, up2: cur2})}
		s, err := k.Encode(in)
		if err != nil {
			// Only what Decode would refuse is refused.
			if !errors.Is(err, ErrCursorTooLong) || len(cur1)+len(cur2) < maxCursorLen/10 {
				t.Fatalf("Encode(%d and %d bytes of cursors): %v", len(cur1), len(cur2), err)
			}
			return
		}
		out, err := k.Decode(s, method)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v", in, err)
		}
		if out.Method != in.Method || !reflect.DeepEqual(out.Pending, in.Pending) {
			t.Fatalf("round trip: %+v became %+v", in, out)
		}
		b := []byte(s)
		i := (flip%len(b) + len(b)) % len(b)
		b[i] ^= 0x20
		if _, err := k.Decode(string(b), method); !errors.Is(err, ErrBadCursor) {
			t.Fatalf("a cursor with byte %d changed: %v", i, err)
		}
	})
}

// validUTF8 replaces invalid bytes by U+FFFD, as encoding/json does.
func validUTF8(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[string([]rune(k))] = string([]rune(v))
	}
	return out
}
