package upstream

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// progress routes an upstream's progress notifications back to the call
// they belong to, wherever they arrive: on the call's own response stream,
// on a legacy session's GET stream, or on a stdio process's stdout. Callers
// choose progress tokens, so two of them may choose the same one, and on a
// shared channel the token is the only way back to the call: each call that
// asks for progress sends a token of Manifold's own, and its notifications
// get the caller's token back.
type progress struct {
	mu    sync.Mutex
	next  uint64
	calls map[string]progressCall // by the token sent upstream, as JSON
}

type progressCall struct {
	original json.RawMessage
	notify   func(*jsonrpc.Message)
}

// register gives a call that wants progress a token of its own; done
// forgets it.
func (p *progress) register(original json.RawMessage, notify func(*jsonrpc.Message)) (token json.RawMessage, done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string]progressCall{}
	}
	p.next++
	token = jsonrpc.Quote("manifold-" + strconv.FormatUint(p.next, 10))
	p.calls[string(token)] = progressCall{original: original, notify: notify}
	return token, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.calls, string(token))
	}
}

// deliver passes a progress notification to its call, with the caller's
// token, and reports whether it belonged to one.
func (p *progress) deliver(m *jsonrpc.Message) bool {
	params, err := jsonrpc.ParseObject(m.Params)
	if err != nil {
		return false
	}
	p.mu.Lock()
	c, ok := p.calls[string(params[mcp.MetaProgressToken])]
	p.mu.Unlock()
	if !ok {
		return false
	}
	params[mcp.MetaProgressToken] = c.original
	c.notify(&jsonrpc.Message{JSONRPC: jsonrpc.Version, Method: m.Method, Params: params.Marshal()})
	return true
}

// asks are the calls in flight whose callers can be asked a question. A
// question on a call's own stream goes to that call; one on a shared
// channel (stdout, a legacy session's GET stream) names no call, so it goes
// to the only call that can ask, if there is exactly one.
type asks struct {
	mu    sync.Mutex
	calls map[*askingCall]struct{}
}

type askingCall struct {
	ctx context.Context
	ask mcp.Ask
}

// add registers a call; the function returned removes it.
func (a *asks) add(ctx context.Context, ask mcp.Ask) func() {
	c := &askingCall{ctx: ctx, ask: ask}
	a.mu.Lock()
	if a.calls == nil {
		a.calls = map[*askingCall]struct{}{}
	}
	a.calls[c] = struct{}{}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.calls, c)
	}
}

// only returns the one asking call, if there is exactly one.
func (a *asks) only() (context.Context, mcp.Ask) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.calls) != 1 {
		return nil, nil
	}
	for c := range a.calls {
		return c.ctx, c.ask
	}
	return nil, nil
}

// cannotAsk is the Ask of a call whose caller cannot be asked anything.
func cannotAsk(context.Context, *jsonrpc.Message) (json.RawMessage, error) {
	return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "the caller of this request cannot be asked")
}
