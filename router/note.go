package router

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/mcp"
)

// Note is what the router learns while serving one request that the
// request's author did not say: which upstream served it, and where the
// answer came from. A link that reports requests (the audit log) gives each
// request one with Noted.
type Note struct {
	mu       sync.Mutex // a merged list's upstreams are fetched at once
	upstream string
	tier     string
}

// Several is the upstream or tier of a note for a request that several
// upstreams served differently (a merged list).
const Several = "mixed"

// Upstream and Tier return what the note holds.
func (n *Note) Upstream() string { n.mu.Lock(); defer n.mu.Unlock(); return n.upstream }
func (n *Note) Tier() string     { n.mu.Lock(); defer n.mu.Unlock(); return n.tier }

func (n *Note) setUpstream(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.upstream = merged(n.upstream, name)
}

func (n *Note) setTier(tier string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tier = merged(n.tier, tier)
}

func merged(cur, v string) string {
	if cur == "" || cur == v {
		return v
	}
	return Several
}

type noteKey struct{}

func noteOf(ctx context.Context) *Note {
	n, _ := ctx.Value(noteKey{}).(*Note)
	return n
}

type sessionKey struct{}

// legacySession is what a request's context says of the legacy session it
// came on.
type legacySession struct{ id, version string }

// WithSession returns ctx naming the legacy session a request came on and
// the revision negotiated on it.
func WithSession(ctx context.Context, id, version string) context.Context {
	return context.WithValue(ctx, sessionKey{}, legacySession{id, version})
}

// SessionOf returns the legacy session id ctx names, or "".
func SessionOf(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(legacySession)
	return s.id
}

// sessionVersion returns the revision of the legacy session ctx names,
// or "".
func sessionVersion(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(legacySession)
	return s.version
}

// Noted gives each request a Note and, once it is answered, hands report
// the request, the note, how long it took and its error.
func Noted(report func(ctx context.Context, req *mcp.Request, n *Note, d time.Duration, err error)) Link {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
			n := &Note{}
			start := time.Now()
			res, err := next.Handle(context.WithValue(ctx, noteKey{}, n), req)
			report(ctx, req, n, time.Since(start), err)
			if r, ok := ctx.Value(reportedKey{}).(*Reported); ok {
				r.Store(true)
			}
			return res, err
		})
	}
}

// Reported says whether Noted reported a request: a frontend link that
// puts one in the request's context (WithReported) reports, itself, the
// requests that never got that far (refused by a link, invalid, or not
// the router's to answer).
type Reported struct{ atomic.Bool }

type reportedKey struct{}

// WithReported returns ctx carrying a new Reported.
func WithReported(ctx context.Context) (context.Context, *Reported) {
	r := &Reported{}
	return context.WithValue(ctx, reportedKey{}, r), r
}
