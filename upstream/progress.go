package upstream

import (
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
