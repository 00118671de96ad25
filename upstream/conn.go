package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// conn is what a transport does for the era logic: carry one exchange, send a
// notification, and say whether a session still belongs to the live channel.
type conn interface {
	// ready waits until the channel can carry a negotiation and returns its
	// generation (a stdio process instance; always 0 for HTTP).
	ready(ctx context.Context) (uint64, error)
	// alive reports whether a session negotiated on generation gen can still
	// be used.
	alive(gen uint64) bool
	// call sends ex.msg and returns the response with the same id.
	call(ctx context.Context, ex *exchange) (*reply, error)
	// send delivers a notification or a response.
	send(ctx context.Context, ex *exchange) error
	// close ends the session sid (if any) and releases the channel.
	close(ctx context.Context, sid string) error
	// listen runs the subscriptions/listen request ex until ctx ends or the
	// stream does, passing each notification on it to deliver.
	listen(ctx context.Context, ex *exchange, deliver func(*jsonrpc.Message)) error
	// stream carries a legacy session's server-initiated messages (to the
	// onMsg handler) until ctx ends or the session does; opened is called
	// once the stream is open (at once where the session is the stream).
	stream(ctx context.Context, s *session, opened func()) error
	// scoped reports whether every request-scoped notification of a call on
	// session s arrives on the call's own response stream; otherwise some
	// may arrive on a channel the session shares (stdout, a GET stream).
	scoped(s *session) bool
}

// onMessage handles what a server sends that is not the answer to a call:
// its requests (answered through reply, now or later), and notifications.
// gen is the generation of the channel that carried it; ask is the question
// channel of the call whose stream carried the message, or nil when the
// channel is shared.
type onMessage func(ctx context.Context, gen uint64, m *jsonrpc.Message, ask mcp.Ask, reply replier)

// replier sends the answer to a server's request. header is the forwarded
// caller header of the call that a question on a shared channel was put
// for (nil otherwise): the answer is that caller's, and goes with what its
// call went with. A reply on a call's own stream goes with the call's.
type replier func(answer *jsonrpc.Message, header http.Header)

// errNoStream: the server offers no stream for server-initiated messages.
var errNoStream = errors.New("no notification stream")

// exchange is one message with the context a transport needs to carry it.
type exchange struct {
	msg        jsonrpc.Message
	version    string      // MCP-Protocol-Version; "" during initialize
	name       string      // Mcp-Name, for modern requests
	session    string      // Mcp-Session-Id of a legacy HTTP session
	gen        uint64      // stdio process generation the session belongs to
	header     http.Header // forwarded caller headers
	idempotent bool        // may be retried on a connection error
	initial    bool        // the legacy initialize request
	notify     func(*jsonrpc.Message)
	ask        mcp.Ask // puts the server's questions to the caller; may be nil
}

// reply is a response and what the transport learnt carrying it.
type reply struct {
	*jsonrpc.Message
	sessionID string // Mcp-Session-Id returned with an initialize response
}

// StatusError is an HTTP answer that carried no JSON-RPC response: the
// server does not speak the era Manifold assumed, or is failing.
type StatusError struct {
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body)
}

// eraSuspect reports an HTTP answer that suggests the server no longer
// speaks the era Manifold negotiated: a rejection without a JSON-RPC body.
// A 5xx says nothing about the era and is not suspect.
func eraSuspect(err error) bool {
	if err == nil {
		return false // before errors.As, whose target escapes: every call would allocate
	}
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Status {
	case 400, 404, 405, 406, 415:
		return true
	}
	return false
}

// Unreachable reports whether err, from Call, means the server could not be
// reached or failed on its side (network, timeout, a dead process, HTTP 5xx),
// as opposed to refusing the request (HTTP 4xx, a malformed answer). Only
// the former lets a cache stand in with a stale answer. The kinds are named
// one by one: a system error is not a network failure because it happens to
// satisfy net.Error.
func Unreachable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status >= 500
	}
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &op), errors.As(err, &dns):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, errSessionGone), errors.Is(err, errProcessExited), errors.Is(err, errRestarting), errors.Is(err, errNotStarted),
		errors.Is(err, errStreamClosed), errors.Is(err, errNoEndpoint):
		return true
	case errors.Is(err, os.ErrClosed): // a dead child's stdin
		return true
	}
	for _, e := range unreachableErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

var unreachableErrnos = []syscall.Errno{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
	syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN,
}

// cancelled is the notifications/cancelled of the call id, for a transport
// that shares one channel among calls (a call over HTTP is cancelled by
// closing its request).
func cancelled(id json.RawMessage, cause error) []byte {
	b, _ := jsonrpc.Notification(mcp.NotifyCancelled, map[string]any{"requestId": id, "reason": cause.Error()})
	return b
}

// sameOrigin reports whether u is on base's origin (scheme, host and port):
// Manifold's requests, with the callers' forwarded credentials, go nowhere
// else, whether an endpoint event or a redirect names the place.
func sameOrigin(u, base *url.URL) bool { return u.Scheme == base.Scheme && u.Host == base.Host }
