// Package sse reads and writes Server-Sent Events, the framing MCP uses for
// streamed responses and subscription streams over HTTP.
//
// An event is a run of `field: value` lines ended by a blank line; `data`
// lines are joined with newlines, lines starting with ':' are comments (MCP
// uses them as keep-alives). The Reader bounds the size of one event so a
// peer cannot make Manifold buffer without limit.
package sse

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Event is one dispatched event.
type Event struct {
	ID   string
	Name string // the "event" field; "" means "message"
	Data []byte
}

// ErrTooLarge reports an event over the Reader's limit.
var ErrTooLarge = errors.New("sse: event too large")

// Reader decodes events from a stream.
type Reader struct {
	r     *bufio.Reader
	limit int
}

// NewReader returns a Reader that refuses events larger than limit bytes.
func NewReader(r io.Reader, limit int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 16<<10), limit: limit}
}

// Next returns the next event with data, skipping comments and empty events.
// It returns io.EOF at the end of the stream.
func (r *Reader) Next() (*Event, error) {
	var ev Event
	var data []byte
	hasData := false
	size := 0
	for {
		line, err := r.readLine(r.limit - size)
		if err != nil {
			if errors.Is(err, io.EOF) && hasData {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				ev.Data = data
				return &ev, nil
			}
			ev, size = Event{}, 0
			continue
		}
		if line[0] == ':' {
			continue // a keep-alive is no part of the event: it counts only against itself
		}
		size += len(line)
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "event":
			ev.Name = value
		case "id":
			ev.ID = value
		}
	}
}

// readLine reads one line without its terminator (\n, \r\n or \r is not
// supported: MCP peers use \n), failing once it exceeds max bytes.
func (r *Reader) readLine(max int) (string, error) {
	var b strings.Builder
	for {
		frag, err := r.r.ReadSlice('\n')
		if b.Len()+len(frag) > max+2 {
			return "", ErrTooLarge
		}
		b.Write(frag)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if b.Len() > 0 && errors.Is(err, io.EOF) {
			break
		}
		return "", err
	}
	line := strings.TrimSuffix(b.String(), "\n")
	return strings.TrimSuffix(line, "\r"), nil
}

// Writer writes events to an HTTP response, flushing each one. It is safe for
// concurrent use, so keep-alives and events can come from different goroutines.
type Writer struct {
	mu sync.Mutex
	w  io.Writer // StallBound
	rc *http.ResponseController
}

// WriteTimeout bounds a stall of each write: a client that stops reading
// fails the stream instead of holding its writer forever.
const WriteTimeout = 10 * time.Second

// stallChunk is how much StallBound writes under one deadline: a client
// reading 16 KiB in WriteTimeout keeps up.
const stallChunk = 64 << 10

// StallBound is w written in chunks, each under a deadline of its own:
// a client that reads slowly but steadily gets the whole of a large
// answer, and one that stops reading for timeout fails the write. (One
// deadline for the whole write would cut a 15 MB list off a client on a
// slow link.)
func StallBound(w http.ResponseWriter, timeout time.Duration) io.Writer {
	return &stallWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

type stallWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *stallWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	return WriteStallBound(s.w, s.rc, s.timeout, p)
}

// WriteStallBound writes p to w as StallBound does: the caller has set a
// deadline for its first chunk, and each later one gets a new deadline of
// timeout through rc (w's). An answer of one chunk, as most are, costs no
// more than one deadline.
func WriteStallBound(w io.Writer, rc *http.ResponseController, timeout time.Duration, p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		}
		c := min(len(p), stallChunk)
		m, err := w.Write(p[:c])
		n += m
		if err != nil {
			return n, err
		}
		p = p[c:]
	}
	return n, nil
}

// NewWriter sets the SSE response headers and returns a Writer. It does not
// write the status line; the first event (or WriteHeader) does.
func NewWriter(w http.ResponseWriter) *Writer {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	return &Writer{w: StallBound(w, WriteTimeout), rc: http.NewResponseController(w)}
}

// Event writes one `message` event whose data is a single JSON message. A
// line break inside the data (CR, LF or CRLF: whitespace between JSON
// tokens, never inside a string) starts another data line, which readers
// join back with LF. A CR is never written as such: a standard reader
// would take it for the end of a line and lose the rest of it.
func (s *Writer) Event(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	payload := lineBreaks.Replace(string(data))
	if _, err := fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", payload); err != nil {
		return fmt.Errorf("sse write: %w", err)
	}
	return s.flush()
}

// Named writes one event of type name with data on one line (the
// `endpoint` event of the 2024-11-05 HTTP+SSE transport): data must not
// hold a line break.
func (s *Writer) Named(name string, data []byte) error {
	if strings.ContainsAny(name+string(data), "\r\n") {
		return errors.New("sse write: a line break in a one-line event")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return fmt.Errorf("sse write: %w", err)
	}
	return s.flush()
}

var lineBreaks = strings.NewReplacer("\r\n", "\ndata: ", "\r", "\ndata: ", "\n", "\ndata: ")

// Comment writes a comment line, used as a keep-alive.
func (s *Writer) Comment(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return fmt.Errorf("sse write: %w", err)
	}
	return s.flush()
}

func (s *Writer) flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("sse flush: %w", err)
	}
	return nil
}
