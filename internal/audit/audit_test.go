package audit

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A writer stuck on a file that takes nothing (a FIFO nobody reads) holds
// nobody: Reopen returns at once, Close within closeWait, and a Write after
// Close is dropped and counted, not a panic.
func TestStuckWriterHoldsNobody(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "stalled")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	l, err := Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	for range 20_000 { // far more than the pipe and the queue hold
		l.Write(Record{Method: "resources/read", Target: "test://x"})
	}
	start := time.Now()
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	// The bounds are the behaviour: a writer stuck forever must not hold
	// Reopen at all, nor Close past closeWait. Reopen has no wait of its
	// own, so a second is generous.
	if d := time.Since(start); d > time.Second {
		t.Errorf("Reopen waited %v for the stuck writer", d)
	}
	start = time.Now()
	if err := l.Close(); err == nil {
		t.Error("Close reported no loss")
	}
	if d := time.Since(start); d > closeWait+time.Second {
		t.Errorf("Close took %v", d)
	}
	before := l.Dropped()
	l.Write(Record{Method: "after close"})
	if l.Dropped() != before+1 {
		t.Error("a record written after Close was not counted as dropped")
	}
}
