package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/panics"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// onServerMessage handles what the server sends besides its answers:
// requests it makes of us (ping, and the questions of a call, which go to
// that call's caller) and notifications (progress for a call, changes for
// the hub).
func (x *exchanger) onServerMessage(ctx context.Context, gen uint64, msg *jsonrpc.Message, ask mcp.Ask, reply transport.Replier) {
	switch {
	case msg.IsRequest() && msg.Method == mcp.MethodPing:
		reply(&jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: msg.ID, Result: json.RawMessage(`{}`)}, nil)
	case msg.IsRequest() && mcp.Questions[msg.Method] != "":
		x.question(ctx, gen, msg, ask, reply)
	case msg.IsRequest():
		reply(refusal(msg, "not supported by Manifold"), nil)
	case msg.IsNotification() && msg.Method == mcp.NotifyProgress:
		// Progress outside its call's own stream: a legacy session's GET
		// stream, or stdout. A log message there names no request: dropped.
		x.progress.deliver(msg)
	case msg.IsNotification():
		if ev, ok := eventOf(msg); ok {
			x.emit(ev)
		}
	}
}

// question puts a server's question to the caller of the call it belongs
// to: the call whose stream carried it (ask), or on a shared channel (of
// generation gen) the one call it can be attributed to (see calls), whose
// forwarded headers then go with the answer.
func (x *exchanger) question(ctx context.Context, gen uint64, msg *jsonrpc.Message, ask mcp.Ask, reply transport.Replier) {
	var header http.Header
	if ask == nil {
		c := x.calls.only(gen)
		if c == nil {
			reply(refusal(msg, x.unattributed), nil)
			return
		}
		ctx, ask, header = c.ctx, c.ask, c.header
	}
	go func() { reply(answerOf(ctx, msg, ask), header) }()
}

// unattributed says why a question on a shared channel of o's server is
// refused and, on a stdio process that every caller shares, what gives
// each principal one of its own, whose questions are that principal's.
func unattributed(o Options) string {
	const why = "no caller it can be attributed to can be asked"
	if len(o.Command) == 0 || o.PerPrincipal {
		return why
	}
	return fmt.Sprintf("%s: other calls are in flight on upstream %s's one process (per_principal: true runs a process per principal)", why, o.Name)
}

// askContained is ask, a panic in it (on the goroutine of the question, not
// of any request) being its error.
func askContained(ctx context.Context, q *jsonrpc.Message, ask mcp.Ask) (res json.RawMessage, err error) {
	defer panics.Recover(&err)
	return ask(ctx, q)
}

func refusal(msg *jsonrpc.Message, why string) *jsonrpc.Message {
	return &jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: msg.ID, Error: jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "%s: %s", msg.Method, why)}
}

// answerOf puts the server's question to the caller and makes the answer
// the server's response.
func answerOf(ctx context.Context, q *jsonrpc.Message, ask mcp.Ask) *jsonrpc.Message {
	res, err := askContained(ctx, q, ask)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) {
			rpcErr = jsonrpc.Errorf(jsonrpc.CodeInternalError, "the caller did not answer: %v", err)
		}
		return &jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: q.ID, Error: rpcErr}
	}
	return &jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: q.ID, Result: res}
}
