package transport

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

// Conn is what a transport does for the era logic: carry one exchange, send a
// notification, and say whether a session still belongs to the live channel.
type Conn interface {
	// Ready waits until the channel can carry a negotiation and returns its
	// generation (a stdio process instance; always 0 for HTTP).
	Ready(ctx context.Context) (uint64, error)
	// Alive reports whether a session negotiated on generation gen can still
	// be used.
	Alive(gen uint64) bool
	// Call sends ex.Msg and returns the response with the same id.
	Call(ctx context.Context, ex *Exchange) (*Reply, error)
	// Send delivers a notification or a response.
	Send(ctx context.Context, ex *Exchange) error
	// Close ends the session sid (if any) and releases the channel.
	Close(ctx context.Context, sid string) error
	// Listen runs the subscriptions/listen request ex until ctx ends or the
	// stream does, passing each notification on it to deliver.
	Listen(ctx context.Context, ex *Exchange, deliver func(*jsonrpc.Message)) error
	// Stream carries a legacy session's server-initiated messages (to the
	// onMsg handler) until ctx ends or the session does; opened is called
	// once the stream is open (at once where the session is the stream).
	// The session is named by s's Version, Session and Gen.
	Stream(ctx context.Context, s *Exchange, opened func()) error
	// Scoped reports whether every request-scoped notification of a call on
	// a session (modern or not) arrives on the call's own response stream;
	// otherwise some may arrive on a channel the session shares (stdout, a
	// GET stream).
	Scoped(modern bool) bool
	// EndSession ends the session s names, as the transport ends one: a
	// legacy HTTP session's DELETE, a principal's own process; within ctx,
	// which carries the credential of the session's principal.
	EndSession(ctx context.Context, s *Exchange) error
	// Wire names the transport spoken now (WireHTTP, WireSSE, WireStdio).
	Wire() string
	// FallBack is told that an initialize was refused with refused, and
	// reports (ok) whether the transport changed to another that may take
	// it, whose channel's generation it returns once ready. Only WireAuto
	// falls back: to HTTP+SSE when Streamable HTTP refuses its POSTs.
	FallBack(ctx context.Context, refused error) (gen uint64, ok bool, err error)
}

// OnMessage handles what a server sends that is not the answer to a call:
// its requests (answered through reply, now or later), and notifications.
// gen is the generation of the channel that carried it; ask is the question
// channel of the call whose stream carried the message, or nil when the
// channel is shared.
type OnMessage func(ctx context.Context, gen uint64, m *jsonrpc.Message, ask mcp.Ask, reply Replier)

// Replier sends the answer to a server's request. header is the forwarded
// caller header of the call that a question on a shared channel was put
// for (nil otherwise): the answer is that caller's, and goes with what its
// call went with. A reply on a call's own stream goes with the call's.
type Replier func(answer *jsonrpc.Message, header http.Header)

// ErrNoStream: the server offers no stream for server-initiated messages.
var ErrNoStream = errors.New("no notification stream")

// Exchange is one message with the context a transport needs to carry it.
type Exchange struct {
	Msg        jsonrpc.Message
	Version    string      // MCP-Protocol-Version; "" during initialize
	Name       string      // Mcp-Name, for modern requests
	Session    string      // Mcp-Session-Id of a legacy HTTP session
	Gen        uint64      // stdio process generation the session belongs to
	Header     http.Header // forwarded caller headers
	Idempotent bool        // may be retried on a connection error
	Initial    bool        // the legacy initialize request
	Notify     func(*jsonrpc.Message)
	Ask        mcp.Ask // puts the server's questions to the caller; may be nil
}

// Reply is a response and what the transport learnt carrying it.
type Reply struct {
	*jsonrpc.Message
	SessionID string // Mcp-Session-Id returned with an initialize response
}

// ErrSessionGone: the server no longer holds the session, or the channel
// it was negotiated on ended; the next call negotiates again.
var ErrSessionGone = errors.New("session gone")

// SessionEnded is ErrSessionGone for a session whose channel (a stdio
// child, an HTTP+SSE stream) ended as end says, the error its supervisor
// reports too: a watch of the channel learns of the end at the moment the
// supervisor does, and either may be the failing episode's one logged
// line, which must say what happened.
func SessionEnded(end error) error { return fmt.Errorf("%w: %w", ErrSessionGone, end) }

// ErrGracefulClose is a listen answered by its response: the server ended
// the subscription on purpose (it is shutting down, say).
var ErrGracefulClose = errors.New("subscription closed by the server")

// CannotAsk is the Ask of a call whose caller cannot be asked anything.
func CannotAsk(context.Context, *jsonrpc.Message) (json.RawMessage, error) {
	return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "the caller of this request cannot be asked")
}

// Health is the upstream's health record, as a transport reports to it:
// a channel that would not open or was lost is a failure, and a transport
// logs its routine events only while no failing episode is under way.
type Health interface {
	Failure(err error)
	Failing() bool
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
	case errors.Is(err, ErrSessionGone), errors.Is(err, ErrProcessExited), errors.Is(err, errRestarting), errors.Is(err, errNotStarted),
		errors.Is(err, errStreamClosed), errors.Is(err, ErrNoEndpoint):
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
