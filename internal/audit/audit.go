// Package audit writes one JSON line per request: who asked what of which
// upstream, how it ended, which cache tier answered, and how long it took.
//
// A record holds names and outcomes only: the principal (never a token), a
// digest of the session id, the method, the upstream, the URI or tool name;
// never a header value or an argument. Records go through a bounded queue
// to one writer goroutine, so a slow disk never slows a request: when the
// queue is full the record is dropped and counted. Reopen (on SIGHUP) lets
// logrotate move the file away.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Record is one request.
type Record struct {
	Time      time.Time `json:"time"`
	Principal string    `json:"principal,omitempty"`
	// Session is a digest of the legacy session id, so that the lines of
	// one session can be followed without the id itself being usable.
	Session  string `json:"session,omitempty"`
	Method   string `json:"method"`
	Upstream string `json:"upstream,omitempty"`
	// Target is the resource URI, or the tool or prompt name.
	Target string `json:"target,omitempty"`
	// Outcome is "ok" or the JSON-RPC error code.
	Outcome string `json:"outcome"`
	// Tier is where the answer came from: memory, redis, fill (the
	// upstream, through the cache), stale, upstream (not cacheable), or
	// mixed for a list merged from several.
	Tier       string  `json:"tier,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// Stderr is the file name that writes to standard error.
const Stderr = "stderr"

// queueLen bounds the records waiting for the writer.
const queueLen = 4096

// Log is an open audit log. It is safe for concurrent use.
type Log struct {
	path    string
	queue   chan Record
	done    chan struct{}
	dropped atomic.Uint64
	failed  atomic.Uint64

	mu sync.Mutex // guards f and w against Reopen
	f  io.WriteCloser
	w  *bufio.Writer
}

// Open starts a log writing to path (appended to), or to standard error.
func Open(path string) (*Log, error) {
	l := &Log{path: path, queue: make(chan Record, queueLen), done: make(chan struct{})}
	if err := l.Reopen(); err != nil {
		return nil, err
	}
	go l.run()
	return l, nil
}

// Write queues r, or drops it when the queue is full.
func (l *Log) Write(r Record) {
	select {
	case l.queue <- r:
	default:
		l.dropped.Add(1)
	}
}

// Dropped counts the records dropped because the queue was full, and
// Failed those the file refused.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }
func (l *Log) Failed() uint64  { return l.failed.Load() }

func (l *Log) run() {
	defer close(l.done)
	enc := json.NewEncoder(writerFunc(l.write))
	for r := range l.queue {
		if enc.Encode(r) != nil {
			l.failed.Add(1)
		}
		if len(l.queue) == 0 {
			l.flush()
		}
	}
	l.flush()
}

func (l *Log) write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *Log) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Flush() != nil {
		l.failed.Add(1)
	}
}

// Reopen opens the file again (after a rotation moved it) and flushes and
// closes the old one.
func (l *Log) Reopen() error {
	var f io.WriteCloser = nopCloser{os.Stderr}
	if l.path != Stderr {
		file, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		f = file
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w != nil {
		_ = l.w.Flush()
		_ = l.f.Close()
	}
	l.f, l.w = f, bufio.NewWriterSize(f, 64<<10)
	return nil
}

// closeWait bounds how long Close waits for the queue to be written: a file
// that takes no more (a stalled pipe, a hung mount) must not hold a
// shutdown.
const closeWait = 5 * time.Second

// Close writes what is queued and closes the file.
func (l *Log) Close() error {
	close(l.queue)
	select {
	case <-l.done:
	case <-time.After(closeWait):
		// The writer is stuck in a write, holding mu: closing the file
		// under it fails that write, and the writer finishes.
		_ = l.f.Close()
		<-l.done
		return fmt.Errorf("audit log: records still queued after %s were lost", closeWait)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
