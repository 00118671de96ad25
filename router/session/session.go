// Package session keeps the state of legacy callers: the session each one
// opened with `initialize` (revisions 2025-11-25 and before), which every
// later request names by its Mcp-Session-Id.
//
// A Session is small and plain (negotiated version, the caller's
// capabilities and info, log level, subscribed URIs), so it can live in
// process or in Redis, where any replica behind a load balancer finds it. A
// Store hands sessions out by id, refreshes their idle expiry on each use,
// and tells whoever watches a session (the replica holding its GET stream)
// when it changed or ended, wherever the change was made. Messages for a
// session that only its holder can take (a caller's answer to a question
// Manifold asked it) travel the same way.
package session

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// Session is one legacy caller's negotiated state.
type Session struct {
	ID string `json:"id"`
	// Version is the negotiated revision.
	Version string `json:"v"`
	// ClientCapabilities and ClientInfo are what the caller sent in
	// initialize, passed on with each of its requests.
	ClientCapabilities json.RawMessage `json:"caps,omitempty"`
	ClientInfo         json.RawMessage `json:"info,omitempty"`
	// LogLevel is set by logging/setLevel; "" sends no log messages.
	LogLevel string `json:"log,omitempty"`
	// Subscriptions are the merged-view URIs of resources/subscribe.
	Subscriptions []string `json:"subs,omitempty"`
	// Owner is a digest of the principal that opened the session (never
	// its token); only that principal may use it. "" without
	// authentication.
	Owner string `json:"own,omitempty"`
}

// NewID returns a session id of 192 random bits, URL-safe.
func NewID() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrUnknown is the answer for a session id that does not exist, or no
// longer does (expired or deleted): the caller must initialize again.
var ErrUnknown = errors.New("unknown or expired session")

// ErrFull refuses a new session past the configured bound.
var ErrFull = errors.New("too many open sessions")

// Event is what a watcher of a session is told: its state changed (reload
// it), or it ended (deleted or expired).
type Event struct {
	Changed, Ended bool
}

// Store keeps sessions. It is safe for concurrent use.
type Store interface {
	// Create stores a new session.
	Create(ctx context.Context, s *Session) error
	// Get returns the session, refreshing its idle expiry, or ErrUnknown.
	Get(ctx context.Context, id string) (*Session, error)
	// Update replaces the session's state and tells its watchers.
	Update(ctx context.Context, s *Session) error
	// Delete ends the session and tells its watchers.
	Delete(ctx context.Context, id string) error
	// Watch delivers the events of session id until cancel is called.
	Watch(id string) (events <-chan Event, cancel func())
	// Send delivers msg, addressed to session id, to the Receive handler
	// of every replica (this one included); the one waiting for it takes
	// it.
	Send(ctx context.Context, id string, msg *jsonrpc.Message) error
	// Receive sets the handler of messages sent to sessions.
	Receive(func(id string, msg *jsonrpc.Message))
	// Len is the number of sessions open in this store (in this process
	// for the memory store; an estimate is fine).
	Len() int
	Close() error
}
