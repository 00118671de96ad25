// Package audit writes one JSON line per request: who asked what of which
// upstream, how it ended, which cache tier answered, and how long it took.
//
// A record holds names and outcomes only: the principal (never a token), a
// digest of the session id, the endpoint, the method, the upstream, the URI
// or tool name;
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
	Session string `json:"session,omitempty"`
	// Endpoint is the path the request came to: /mcp, or a curated
	// endpoint's.
	Endpoint string `json:"endpoint,omitempty"`
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
	files   chan io.WriteCloser // a reopened file, for the writer to take up
	done    chan struct{}
	dropped atomic.Uint64
	failed  atomic.Uint64

	mu     sync.RWMutex // Write holds it shared; Close exclusively, to close queue
	closed bool
}

// Open starts a log writing to path (appended to), or to standard error.
func Open(path string) (*Log, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	l := &Log{path: path, queue: make(chan Record, queueLen), files: make(chan io.WriteCloser, 1), done: make(chan struct{})}
	go l.run(f)
	return l, nil
}

func open(path string) (io.WriteCloser, error) {
	if path == Stderr {
		return nopCloser{os.Stderr}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return f, nil
}

// Write queues r, or drops it when the queue is full or the log closed.
func (l *Log) Write(r Record) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.dropped.Add(1)
		return
	}
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

// run is the one writer: it owns the file, so a write that blocks (a
// stalled disk) holds nobody else.
func (l *Log) run(f io.WriteCloser) {
	defer close(l.done)
	w := bufio.NewWriterSize(f, 64<<10)
	enc := json.NewEncoder(w)
	swap := func(next io.WriteCloser) {
		if w.Flush() != nil {
			l.failed.Add(1)
		}
		_ = f.Close()
		f = next
		w.Reset(f)
	}
	for r := range l.queue {
		select {
		case next := <-l.files:
			swap(next)
		default:
		}
		if enc.Encode(r) != nil {
			l.failed.Add(1)
		}
		if len(l.queue) == 0 && w.Flush() != nil {
			l.failed.Add(1)
		}
	}
	swap(nil)
	select {
	case next := <-l.files: // reopened after the last record
		_ = next.Close()
	default:
	}
}

// Reopen opens the file again (after a rotation moved it) and hands it to
// the writer, which flushes and closes the old one before its next record.
// It never waits for the writer.
func (l *Log) Reopen() error {
	f, err := open(l.path)
	if err != nil {
		return err
	}
	select {
	case old := <-l.files: // a reopen the writer has not taken up yet
		_ = old.Close()
	default:
	}
	l.files <- f
	return nil
}

// closeWait bounds how long Close waits for the queue to be written: a file
// that takes no more (a stalled pipe, a hung mount) must not hold a
// shutdown.
const closeWait = 5 * time.Second

// Close writes what is queued and closes the file, waiting at most
// closeWait; records still queued then are lost (and the writer, stuck in
// a write, is left to the process's exit).
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	select {
	case <-l.done:
		return nil
	case <-time.After(closeWait):
		return fmt.Errorf("audit log: the file took nothing for %s; queued records lost", closeWait)
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
