package frontend

import (
	"errors"
	"sync"
)

// The streams of legacy sessions this replica holds, for what their callers
// are to get from wherever it was produced: the answers of the 2024-11-05
// HTTP+SSE transport, whose POSTs any replica may take, reach the stream
// through Legacy.toCaller (here, or through the store to the holder).

// streamBook are the session streams this replica holds.
type streamBook struct {
	mu   sync.Mutex
	byID map[string]*outbound
}

// hold makes o the queue of session id's stream until release is called.
func (b *streamBook) hold(id string, o *outbound) (release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byID == nil {
		b.byID = map[string]*outbound{}
	}
	b.byID[id] = o
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.byID[id] == o {
			delete(b.byID, id)
		}
	}
}

// take queues msg on session id's stream if it is held here.
func (b *streamBook) take(id string, msg []byte) (held bool, err error) {
	b.mu.Lock()
	o := b.byID[id]
	b.mu.Unlock()
	if o == nil {
		return false, nil
	}
	return true, o.put(msg)
}

// deliver queues what another replica sent for a stream held here.
func (b *streamBook) deliver(id string, msg []byte) { _, _ = b.take(id, msg) }

// maxQueued and maxQueuedBytes bound what waits for a stream's reader. One
// message is taken whatever its size: it was bounded upstream.
const (
	maxQueued      = 256
	maxQueuedBytes = 8 << 20
)

// errSlowReader refuses a message for a stream whose reader fell behind.
var errSlowReader = errors.New("the client does not read its stream")

// outbound is what waits for one stream's reader: bounded, never blocking
// whoever puts (an upstream's reader, the Redis subscriber). Past its
// bound it overflows once, for good, and the stream ends.
type outbound struct {
	mu       sync.Mutex
	queue    [][]byte // nil: a keep-alive
	bytes    int
	over     bool
	ready    chan struct{} // a signal: something is queued
	overflow chan struct{} // closed on overflow
}

func newOutbound() *outbound {
	return &outbound{ready: make(chan struct{}, 1), overflow: make(chan struct{})}
}

func (o *outbound) put(msg []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.over {
		return errSlowReader
	}
	if len(o.queue) >= maxQueued || len(o.queue) > 0 && o.bytes+len(msg) > maxQueuedBytes {
		o.over, o.queue = true, nil
		close(o.overflow)
		return errSlowReader
	}
	o.queue = append(o.queue, msg)
	o.bytes += len(msg)
	select {
	case o.ready <- struct{}{}:
	default:
	}
	return nil
}

func (o *outbound) overflowed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.over
}

func (o *outbound) takeAll() [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queue
	o.queue, o.bytes = nil, 0
	return q
}
