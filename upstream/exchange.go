package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/mcptrace"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// exchanger carries the client's messages over its connection, and takes
// what the server sends besides its answers (questions.go). Every request
// Manifold sends, its own included, goes through carry, counted among the
// calls in flight on its channel (calls), so that a server's question on
// a shared channel is put to a caller only when no other call could have
// raised it; a call that wants progress sends a token of Manifold's own
// (progress), by which the server's notifications find the call wherever
// they arrive. A caller's call (timed) is also observed: its client span,
// the health record and the Observe hook.
type exchanger struct {
	name string
	// conn is set once New has it: the connection, built after the
	// exchanger, hands the server's messages to onServerMessage.
	conn    transport.Conn
	tr      *translator
	health  *health
	observe func(method string, d time.Duration, err error) // Options.Observe, may be nil
	peer    []attribute.KeyValue                            // where the server is, for its spans
	emit    func(Event)
	// unattributed says why a question on a shared channel was refused.
	unattributed string

	ids      atomic.Int64
	progress progress
	calls    calls
}

func (x *exchanger) nextID() json.RawMessage {
	return strconv.AppendInt(nil, x.ids.Add(1), 10)
}

// timed is exchange, observed: the health record and the Observe hook
// learn of every exchange but those the caller abandoned, which say
// nothing of the server.
func (x *exchanger) timed(ctx context.Context, s *session, req *mcp.Request) (*transport.Reply, error) {
	ctx, span := mcptrace.Start(ctx, tracer, req.Method, clientSpan)
	defer span.End()
	recording := span.IsRecording()
	if recording {
		x.describeCall(span, s, req)
	}
	start := time.Now()
	msg, err := x.exchange(ctx, s, req)
	if recording {
		describeReply(span, req.Method, msg, err)
	}
	if errors.Is(err, context.Canceled) {
		return msg, err
	}
	d := time.Since(start)
	x.health.observe(d, err)
	if x.observe != nil {
		x.observe(req.Method, d, err)
	}
	return msg, err
}

func (x *exchanger) exchange(ctx context.Context, s *session, req *mcp.Request) (*transport.Reply, error) {
	req, notify, done := x.routeProgress(s, req)
	defer done()
	ex := &transport.Exchange{
		Msg:        jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: x.nextID(), Method: req.Method, Params: x.tr.params(ctx, s, req)},
		Version:    s.Version,
		Session:    s.id,
		Gen:        s.gen,
		Header:     x.tr.forwarded(req.Header),
		Idempotent: idempotent(req.Method),
		Notify:     notify,
		Ask:        req.Ask,
	}
	if m, ok := mcp.Lookup(req.Method); ok && m.NameParam != "" {
		ex.Name = req.Params.String(m.NameParam)
	}
	if s.Modern && len(req.ParamHeaders) > 0 {
		if ex.Header == nil {
			ex.Header = http.Header{}
		}
		for k, v := range req.ParamHeaders {
			ex.Header[k] = v
		}
	}
	return x.carry(ctx, ex)
}

// carry sends ex over the transport, counted among the calls in flight for
// as long as it takes (see calls).
func (x *exchanger) carry(ctx context.Context, ex *transport.Exchange) (*transport.Reply, error) {
	defer x.calls.add(ctx, ex.Gen, ex.Ask, ex.Header)()
	return x.conn.Call(ctx, ex)
}

// routeProgress prepares a call whose progress may arrive away from its own
// stream (see progress): the request gets a token of Manifold's own, and
// the notifications of the call's stream pass through the router too. done
// forgets the token once the call is over.
func (x *exchanger) routeProgress(s *session, req *mcp.Request) (*mcp.Request, func(*jsonrpc.Message), func()) {
	tok, wants := req.Meta[mcp.MetaProgressToken]
	if !wants || req.Notify == nil || x.conn.Scoped(s.Modern) {
		return req, req.Notify, func() {}
	}
	upTok, done := x.progress.register(tok, req.Notify)
	sub := *req
	sub.Meta = req.Meta.Clone()
	sub.Meta[mcp.MetaProgressToken] = upTok
	notify := func(m *jsonrpc.Message) {
		if m.Method == mcp.NotifyProgress {
			x.progress.deliver(m) // with the caller's token back
			return
		}
		req.Notify(m)
	}
	return &sub, notify, done
}

// idempotent lists the methods that may be retried: reads and lists, the
// cacheable methods.
func idempotent(method string) bool {
	m, ok := mcp.Lookup(method)
	return ok && m.Retry
}
