// Package frontend turns each downstream wire into calls of the router and
// the hub, and their answers back into that wire.
//
// What every frontend shares is transport-neutral and lives in the
// Dispatcher: the rules a modern request must satisfy (Validate), the choice
// between the router and the hub that the method table makes, the ordered
// delivery of an upstream's progress and log notifications ahead of the
// answer, and the framing of a subscription as a stream of messages. A
// frontend supplies what its wire alone knows: how a message arrives, an
// mcp.Mirror of request fields (the HTTP headers), and a Writer that carries
// notifications and the answer back. The Streamable HTTP endpoint (HTTP),
// the 2024-11-05 HTTP+SSE transport (SSE) and stdio (Stdio) are such
// frontends; the legacy sessions they carry are Legacy's, whatever the wire.
// Cross-cutting HTTP concerns (Host and Origin checks, authentication, body
// limits) are links of a chain around the HTTP ones (chain.go).
package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/panics"
	"github.com/manifold-mcp/manifold/router"
	"github.com/manifold-mcp/manifold/router/hub"
)

// Writer carries one request's answer back over a frontend's wire: any
// number of notifications, then exactly one Result or Error. One goroutine
// at a time uses it.
type Writer interface {
	// Notify sends a notification ahead of the answer. It may block while
	// the client is slow (within the frontend's own write deadline), and
	// fails once the client is gone.
	Notify(msg []byte) error
	Result(id, result json.RawMessage)
	Error(id json.RawMessage, err *jsonrpc.Error)
}

// KeepAliver is a Writer that can tell a quiet client its stream is alive.
type KeepAliver interface {
	KeepAlive() error
}

// Options configure a Dispatcher.
type Options struct {
	// Handler answers every request that is not a stream.
	Handler router.Handler
	// Links are what Handler is wrapped in (tracing, metrics, the audit
	// log), once, by NewDispatcher; and around the requests the
	// dispatcher answers itself too: a
	// listen up to its acknowledgment, a legacy session's initialize, ping,
	// logging/setLevel and resources/(un)subscribe. Every request is then
	// traced, counted and audited alike.
	Links []router.Link
	// Hub serves subscriptions/listen; without it the method is unknown.
	Hub *hub.Hub
	// Capabilities is what Manifold serves, for a legacy initialize.
	Capabilities func(context.Context) mcp.Capabilities
	// KeepAlive is the interval of keep-alives on a quiet subscription.
	KeepAlive time.Duration
	// Plans says Handler plans the reads it serves by their shape
	// (mcp.Shape; the router does when its cache keeps answers): only then
	// does the HTTP frontend remember requests by shape (shapes.go), which
	// would otherwise cost a digest of each read for nothing.
	Plans  bool
	Logger *slog.Logger
}

// Dispatcher is the transport-neutral part of every frontend.
type Dispatcher struct {
	o Options
}

// NewDispatcher returns a Dispatcher.
func NewDispatcher(o Options) *Dispatcher {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 25 * time.Second
	}
	if o.Handler != nil {
		o.Handler = router.Chain(o.Handler, o.Links...)
	}
	return &Dispatcher{o: o}
}

// Validate checks a modern request (msg.IsRequest) in the order the
// specification's examples and the conformance suite agree on: required
// `_meta` members (-32602), then the mirrored version against `_meta`
// (-32020: a mismatch beats an unsupported version), then the version
// itself (-32022), then the mirrored method and name (-32020).
func Validate(msg *jsonrpc.Message, mirror mcp.Mirror) (*mcp.Request, *jsonrpc.Error) {
	params, meta, rpcErr := msg.RequestParams()
	if rpcErr != nil {
		return nil, rpcErr
	}
	version, ok := meta.Str(mcp.MetaProtocolVersion)
	if !ok || version == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params._meta[%q] is required and must be a string", mcp.MetaProtocolVersion)
	}
	if caps := meta[mcp.MetaClientCapabilities]; len(caps) == 0 || caps[0] != '{' {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params._meta[%q] is required and must be an object", mcp.MetaClientCapabilities)
	}
	if rpcErr := check(mirror, mcp.HeaderProtocolVersion, version); rpcErr != nil {
		return nil, rpcErr
	}
	if version != mcp.Version {
		return nil, jsonrpc.Errorf(jsonrpc.CodeUnsupportedVersion, "unsupported protocol version %q", version).
			WithData(map[string]any{"supported": []string{mcp.Version}, "requested": version})
	}
	if rpcErr := check(mirror, mcp.HeaderMethod, msg.Method); rpcErr != nil {
		return nil, rpcErr
	}
	if m, ok := mcp.Lookup(msg.Method); ok && m.NameParam != "" {
		name, ok := params.Str(m.NameParam)
		if _, present := params[m.NameParam]; present && !ok {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.%s must be a string", m.NameParam)
		}
		if rpcErr := check(mirror, mcp.HeaderName, name); rpcErr != nil {
			return nil, rpcErr
		}
	}
	return &mcp.Request{Method: msg.Method, Params: params, Meta: meta, Raw: msg.Params, Mirror: mirror}, nil
}

func check(mirror mcp.Mirror, field, want string) *jsonrpc.Error {
	if mirror == nil {
		return nil
	}
	return mirror.Check(field, want)
}

// IsStream reports whether method is answered with a stream of messages.
func IsStream(method string) bool {
	m, ok := mcp.Lookup(method)
	return ok && m.Route == mcp.RouteStream
}

// Serve answers the validated request req, whose id is id, over w. It
// returns when the answer is written or the caller is gone (ctx).
func (d *Dispatcher) Serve(ctx context.Context, id json.RawMessage, req *mcp.Request, w Writer) {
	if IsStream(req.Method) && d.o.Hub != nil {
		d.listen(ctx, id, req, w)
		return
	}
	res, err := d.handle(ctx, req, w)
	if err != nil {
		w.Error(id, err)
		return
	}
	w.Result(id, res)
}

// handle runs a request that is answered once, passing the notifications
// the caller asked for to w ahead of the answer, which it returns.
func (d *Dispatcher) handle(ctx context.Context, req *mcp.Request, w Writer) (json.RawMessage, *jsonrpc.Error) {
	_, progress := req.Meta[mcp.MetaProgressToken]
	logLevel := req.Meta.String(mcp.MetaLogLevel)
	var n *notifier
	if progress || logLevel != "" { // else there is nothing to pass on
		n = &notifier{w: w, progress: progress, logLevel: logLevel}
		req.Notify = n.notify
	}
	res, err := d.run(ctx, req)
	if n != nil {
		n.finish()
	}
	if err != nil {
		return nil, d.answerable(req.Method, err)
	}
	return res, nil
}

// run is the handler's answer, a panic in it (on this goroutine: every
// frontend's, stdio's too) being an error like any other.
func (d *Dispatcher) run(ctx context.Context, req *mcp.Request) (res json.RawMessage, err error) {
	defer panics.Recover(&err)
	return d.o.Handler.Handle(ctx, req)
}

// local runs answer, a request the dispatcher answers itself, inside
// Links, with panics contained as in run.
func (d *Dispatcher) local(ctx context.Context, req *mcp.Request, answer router.HandlerFunc) (res json.RawMessage, err error) {
	defer panics.Recover(&err)
	return router.Chain(answer, d.o.Links...).Handle(ctx, req)
}

// answerable turns a handler's error into what the caller may see: a
// *jsonrpc.Error as it is, anything else (a bug) as an internal error, with
// the details in the log: a panic's, wherever it was contained, with its
// stack.
func (d *Dispatcher) answerable(method string, err error) *jsonrpc.Error {
	var rpcErr *jsonrpc.Error
	var p *panics.Error
	switch {
	case errors.As(err, &rpcErr):
		return rpcErr
	case errors.As(err, &p):
		d.o.Logger.Error("panic serving request", "method", method, "panic", p.Value, "stack", string(p.Stack))
	default:
		d.o.Logger.Error("handler failed", "method", method, "err", err)
	}
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "internal error")
}

// notifier passes the request-scoped notifications an upstream sends while
// serving a request (progress, log messages) to the caller's Writer, in
// order and only those the caller asked for. They are queued, never written
// by the goroutine that delivers them: that goroutine may be an upstream's
// only reader (stdio), which a client that stops reading must not block. A
// full queue drops.
type notifier struct {
	w        Writer
	progress bool
	logLevel string // the least severe log level the caller wants; "" for none

	mu    sync.Mutex
	done  bool
	queue chan []byte   // nil until the first notification
	wrote chan struct{} // closed when the queue is drained
}

const notifyQueue = 32

func (n *notifier) notify(m *jsonrpc.Message) {
	if !(m.Method == mcp.NotifyProgress && n.progress || m.Method == mcp.NotifyMessage && mcp.LogAllowed(n.logLevel, m)) {
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done {
		return
	}
	if n.queue == nil {
		n.queue, n.wrote = make(chan []byte, notifyQueue), make(chan struct{})
		go func() {
			defer close(n.wrote)
			for b := range n.queue {
				_ = n.w.Notify(b)
			}
		}()
	}
	select {
	case n.queue <- b:
	default:
	}
}

// finish stops taking notifications and waits until the queued ones are
// written, so the answer comes last.
func (n *notifier) finish() {
	n.mu.Lock()
	n.done = true
	queue := n.queue
	n.mu.Unlock()
	if queue != nil {
		close(queue)
		<-n.wrote
	}
}
