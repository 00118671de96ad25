package sse

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReader(t *testing.T) {
	in := ": keep-alive\n\nevent: message\nid: 7\ndata: {\"a\":\ndata: 1}\n\ndata: second\r\n\r\n: trailing comment\n"
	r := NewReader(strings.NewReader(in), 1024)
	ev, err := r.Next()
	if err != nil || ev.Name != "message" || ev.ID != "7" || string(ev.Data) != "{\"a\":\n1}" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	ev, err = r.Next()
	if err != nil || string(ev.Data) != "second" {
		t.Fatalf("second event %+v, %v", ev, err)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	big := NewReader(strings.NewReader("data: "+strings.Repeat("x", 5000)+"\n\n"), 1024)
	if _, err := big.Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized event: %v", err)
	}
	cut := NewReader(strings.NewReader("data: partial"), 1024)
	if _, err := cut.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated event: %v", err)
	}
}

// Keep-alives are not part of any event: a quiet stream may send them for
// ever, and the event after them is measured alone. A comment line is
// still bounded by itself.
func TestKeepAlivesDoNotCount(t *testing.T) {
	in := strings.Repeat(": keep-alive\n\n", 1000) + strings.Repeat(": keep-alive\n", 1000) + "data: " + strings.Repeat("x", 900) + "\n\n"
	r := NewReader(strings.NewReader(in), 1024)
	ev, err := r.Next()
	if err != nil || len(ev.Data) != 900 {
		t.Fatalf("event after 2000 keep-alives: %v", err)
	}
	long := NewReader(strings.NewReader(": "+strings.Repeat("x", 5000)+"\n\ndata: y\n\n"), 1024)
	if _, err := long.Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized comment: %v", err)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec)
	if err := w.Event([]byte("{\"a\":\n1}")); err != nil {
		t.Fatal(err)
	}
	_ = w.Comment("ping")
	if rec.Header().Get("X-Accel-Buffering") != "no" || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Errorf("headers %v", rec.Header())
	}
	ev, err := NewReader(strings.NewReader(rec.Body.String()), 1024).Next()
	if err != nil || string(ev.Data) != "{\"a\":\n1}" {
		t.Errorf("read back %+v %v from %q", ev, err, rec.Body.String())
	}
}
