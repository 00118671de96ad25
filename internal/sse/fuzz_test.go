package sse

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// The Reader never hands out more than its limit, whatever the stream; and
// what the Writer writes reads back as the same message (line breaks inside
// a message are JSON whitespace, which a reader sees as "\n"), with no lone
// CR that a standard reader would take for a line end.
func FuzzReadWrite(f *testing.F) {
	f.Add([]byte("event: message\nid: 1\ndata: {\"a\":\ndata: 1}\n\n: ping\n\n"), []byte("{\"a\":1}"))
	f.Add([]byte("data: x\r\n\r\ndata:y\n\n"), []byte("{\r\n\"a\"\r:\n1}"))
	f.Add([]byte(strings.Repeat("data: "+strings.Repeat("x", 100)+"\n", 20)), []byte(""))
	f.Fuzz(func(t *testing.T, stream, message []byte) {
		const limit = 1024
		r := NewReader(bytes.NewReader(stream), limit)
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			if len(ev.Data) > limit {
				t.Fatalf("event of %d bytes through a %d-byte limit", len(ev.Data), limit)
			}
		}

		rec := httptest.NewRecorder()
		if err := NewWriter(rec).Event(message); err != nil {
			t.Fatal(err)
		}
		out := rec.Body.Bytes()
		if i := bytes.IndexByte(out, '\r'); i >= 0 {
			t.Fatalf("the writer wrote a CR: %q", out)
		}
		ev, err := NewReader(bytes.NewReader(out), len(out)+1).Next()
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("read back %q: %v", out, err)
		}
		want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(message))
		if got := ""; ev != nil && string(ev.Data) != want || ev == nil && want != got {
			t.Fatalf("wrote %q, read back %v", message, ev)
		}
	})
}
