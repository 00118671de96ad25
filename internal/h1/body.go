package h1

import (
	"context"
	"errors"
	"io"
	"sync"
)

// body is a response's body: it gives the connection back to the pool
// when read to the end, and closes it otherwise.
type body struct {
	t    *Transport
	c    *conn
	rc   io.ReadCloser // http.ReadResponse's body
	stop func() bool   // ends the context's watch; false once it fired
	ctx  context.Context
	keep bool // the exchange allows reuse (no Connection: close)

	mu      sync.Mutex
	reading bool  // a Read is in progress
	closed  bool  // Close was called
	done    bool  // the connection is gone: pooled or closed
	err     error // what a Read returns once done
}

var errBodyClosed = errors.New("h1: read on closed response body")

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return 0, errBodyClosed
	case b.done:
		b.mu.Unlock()
		return 0, b.err
	}
	b.reading = true
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.reading = false
	interrupted := b.closed
	b.mu.Unlock()
	switch {
	case errors.Is(err, io.EOF):
		b.finish(!interrupted, io.EOF)
	case err != nil:
		err = contextOr(b.ctx, err)
		b.finish(false, err)
	case interrupted:
		b.finish(false, errBodyClosed)
	}
	return n, err
}

// Close before the end closes the connection: what is left of the body
// is not read. (net/http's body returns io.EOF with its last bytes, so a
// caller that read exactly Content-Length bytes has seen the end.) A Close
// during a Read interrupts the Read.
func (b *body) Close() error {
	b.mu.Lock()
	if b.done || b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	reading := b.reading
	b.mu.Unlock()
	if reading {
		_ = b.c.nc.Close() // the Read fails and finishes
		return nil
	}
	b.finish(false, errBodyClosed)
	return nil
}

// finish pools the connection if ok and the exchange allows it, and
// closes it otherwise; later Reads return err. Only the first call counts.
func (b *body) finish(ok bool, err error) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done, b.err = true, err
	b.mu.Unlock()
	// A watch that fired moved the deadline: the connection is spent. One
	// that did not fire never touched it (nothing else sets a deadline), so
	// there is none to clear before the connection is pooled.
	if b.stop() && ok && b.keep && b.c.br.Buffered() == 0 {
		b.t.put(b.c)
		return
	}
	_ = b.c.nc.Close()
}
