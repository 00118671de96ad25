package upstream

import (
	"context"
	"encoding/json"
	"net/http"
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

// calls are the calls in flight on the upstream's channels, each with the
// Ask of its caller, nil when its caller cannot be asked anything (a read, a
// list page, a refresh, Manifold's own requests). A question on a call's
// own stream goes to that call. One on a shared channel (stdout, an
// HTTP+SSE stream, a legacy session's GET stream) names no call: it can be
// attributed only while exactly one call is in flight on that channel (a
// process per principal makes each principal's stdout a channel of its
// own: children.go), and goes to that
// call's caller if it can be asked. With two calls in flight, a question
// could be either's; put to the wrong caller, it would show one caller
// another's question and feed it the other's answer, so it is refused.
type calls struct {
	mu  sync.Mutex
	set map[*callInFlight]struct{}
}

type callInFlight struct {
	ctx    context.Context
	gen    uint64      // the channel it is carried on
	ask    mcp.Ask     // nil: the caller cannot be asked
	header http.Header // the caller headers forwarded with the call
}

// add registers a call on channel gen; the function returned removes it.
func (a *calls) add(ctx context.Context, gen uint64, ask mcp.Ask, header http.Header) func() {
	c := &callInFlight{ctx: ctx, gen: gen, ask: ask, header: header}
	a.mu.Lock()
	if a.set == nil {
		a.set = map[*callInFlight]struct{}{}
	}
	a.set[c] = struct{}{}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.set, c)
	}
}

// only returns the one call in flight on channel gen, if there is exactly
// one and its caller can be asked. A call on another channel (a process of
// another principal's, a stream that ended) cannot have raised a question
// on gen.
func (a *calls) only(gen uint64) *callInFlight {
	a.mu.Lock()
	defer a.mu.Unlock()
	var only *callInFlight
	for c := range a.set {
		if c.gen != gen {
			continue
		}
		if only != nil {
			return nil
		}
		only = c
	}
	if only == nil || only.ask == nil {
		return nil
	}
	return only
}
