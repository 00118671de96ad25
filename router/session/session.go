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
// session that only one replica can take travel the same way, in either
// direction: from the caller to the replica serving the exchange they belong
// to (an answer to a question Manifold asked it, a cancellation), and to the
// caller through the replica holding its stream (the answers of the
// 2024-11-05 HTTP+SSE transport, whose POSTs any replica may take).
//
// A store bounds the sessions open at once (Limits.Max) and those of one
// share (Limits.PerShare): the principal that opened them, so that one
// caller cannot take every session. The
// Redis store counts them in sorted sets scored by expiry, one for all and
// one per share, kept in step with each session's own expiry by the scripts
// that create, refresh and delete it; an expired session counts no more on
// any replica, whether or not anyone looked at it since.
package session

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
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
	// Share names whose share of the sessions this one counts against
	// (Limits.PerShare): a digest of the principal; "" (no authentication)
	// counts against none. It never changes.
	Share string `json:"share,omitempty"`
	// Endpoint is the path of the curated endpoint the session was opened
	// on ("" for /mcp): its requests are served in that endpoint's view,
	// and only there.
	Endpoint string `json:"ep,omitempty"`
}

// MaxClientBytes bounds each of ClientCapabilities and ClientInfo: a
// session keeps them for its whole life and passes them on with each of its
// requests, so a client may not make them large. Real clients send well
// under a kilobyte of each.
const MaxClientBytes = 16 << 10

// Limits bound the sessions of a store; 0 is no bound.
type Limits struct {
	// Max bounds the sessions open at once.
	Max int
	// PerShare bounds the sessions open at once of one Session.Share.
	PerShare int
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

// FullError refuses a new session past one of the Limits.
type FullError struct {
	// Share is set when the bound is that of the session's share
	// (Limits.PerShare), not of the whole store (Limits.Max).
	Share bool
	Limit int
}

func (e *FullError) Error() string {
	if e.Share {
		return fmt.Sprintf("this caller has %d sessions open, its share", e.Limit)
	}
	return fmt.Sprintf("%d sessions are open, the most there may be", e.Limit)
}

// Direction says which replica a message sent to a session is for.
type Direction uint8

const (
	// FromCaller is a message of the caller (an answer to a question, a
	// cancellation) for the replica serving the exchange it belongs to.
	FromCaller Direction = iota + 1
	// ToCaller is a message for the caller (an answer, a notification, a
	// question), for the replica holding the session's stream.
	ToCaller
)

// Event is what a watcher of a session is told: its state changed (reload
// it), or it ended (deleted or expired).
type Event struct {
	Changed, Ended bool
}

// Store keeps sessions. It is safe for concurrent use.
type Store interface {
	// Create stores a new session, or refuses it with a *FullError past
	// the store's Limits.
	Create(ctx context.Context, s *Session) error
	// Get returns the session, refreshing its idle expiry, or ErrUnknown.
	Get(ctx context.Context, id string) (*Session, error)
	// Update replaces the session's state and tells its watchers.
	Update(ctx context.Context, s *Session) error
	// Delete ends the session and tells its watchers.
	Delete(ctx context.Context, id string) error
	// Watch delivers the events of session id until cancel is called.
	Watch(id string) (events <-chan Event, cancel func())
	// Send delivers msg, an encoded JSON-RPC message addressed to session
	// id, to the Receive handler of every replica (this one included); the
	// one it is for (dir) takes it. Delivery is at most once: a message
	// sent while a replica's link to the others is down is lost to it.
	Send(ctx context.Context, id string, dir Direction, msg []byte) error
	// Receive sets the handler of messages sent to sessions.
	Receive(func(id string, dir Direction, msg []byte))
	// Len is the number of sessions open in this store (in this process
	// for the memory store; an estimate is fine): active or idle, they
	// count against Limits until their idle expiry.
	Len() int
	// Active is the number of those used within the last within: a client
	// that left without ending its session stops counting once its session
	// has been idle that long, though the session is kept until it expires.
	Active(within time.Duration) int
	Close() error
}
