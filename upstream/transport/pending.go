package transport

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// pending is the table of calls waiting for their answers on a channel that
// many calls share (a process's stdout, an HTTP+SSE stream), where an answer
// finds its call by id alone. Once the channel has ended (fail), every
// waiting call learns it, and no call waits on it again.
type pending struct {
	mu     sync.Mutex
	calls  map[string]chan *jsonrpc.Message
	failed bool
}

// call waits for the answer to the request id that send sends: the answer,
// or ok false when the channel ended first. When ctx ends first the call is
// forgotten and cancel tells the server, with the cause.
func (t *pending) call(ctx context.Context, id json.RawMessage, send func() error, cancel func(cause error)) (m *jsonrpc.Message, ok bool, err error) {
	ch, ok := t.add(string(id))
	if !ok {
		return nil, false, nil
	}
	if err := send(); err != nil {
		t.forget(string(id))
		return nil, true, err
	}
	select {
	case m, ok := <-ch:
		return m, ok, nil
	case <-ctx.Done():
		t.forget(string(id))
		cancel(ctx.Err())
		return nil, true, ctx.Err()
	}
}

func (t *pending) add(key string) (chan *jsonrpc.Message, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed {
		return nil, false
	}
	if t.calls == nil {
		t.calls = map[string]chan *jsonrpc.Message{}
	}
	ch := make(chan *jsonrpc.Message, 1)
	t.calls[key] = ch
	return ch, true
}

func (t *pending) forget(key string) {
	t.mu.Lock()
	delete(t.calls, key)
	t.mu.Unlock()
}

// answer hands the response m to the call it answers, and reports whether
// one was waiting: a late answer to a call that gave up finds none.
func (t *pending) answer(m *jsonrpc.Message) bool {
	t.mu.Lock()
	ch := t.calls[string(m.ID)]
	delete(t.calls, string(m.ID))
	t.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- m
	return true
}

// fail ends every waiting call: the channel ended.
func (t *pending) fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	for key, ch := range t.calls {
		close(ch)
		delete(t.calls, key)
	}
}
