package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// Sessions of their own, toward a server reached with each caller's own
// credential (Options.PerPrincipal, OAuth mode user). A server that keeps
// legacy sessions binds each to the user whose token opened it and refuses
// another user's request in it (the go-sdk answers 403 "session user
// mismatch"), as the specification's security guidance asks. So each
// principal's calls go in a session that principal opened: the negotiated
// one for the principal it was negotiated as, else one initialized for the
// principal on its first call, with its token. Every one of them is kept
// in the pool (pool.go), by principal. At most maxOwnSessions are kept idle: to make room,
// the least recently used with no call in it is ended (DELETE, with its
// principal's token), and its principal opens another on its next call; a
// session is never ended under a call. A modern server has no session,
// and a legacy one that gave no session id keeps nothing to bind: both are
// spoken to as before. An HTTP+SSE server's one stream is not split per
// principal. A stdio server run per principal keeps its processes here the
// same way: each principal's session is on a process of its own
// (children.go), which ends with the session.

// maxOwnSessions bounds the idle sessions kept for principals: as many
// principals as call, which callers control.
const maxOwnSessions = 256

// endingTime bounds how long Close waits for the sessions it ends.
const endingTime = 5 * time.Second

// keepsOwn reports whether s is one to keep per principal: a legacy
// session (it has an id) of a server reached per principal, or any session
// of a stdio server run per principal, the anonymous caller's included (the
// process is the principal's, whatever the era).
func (ss *sessions) keepsOwn(s *session) bool {
	return ss.process || s.owner != "" && !s.Modern && s.id != ""
}

// processPerPrincipal reports whether o's server is a stdio one run as a
// process per principal.
func processPerPrincipal(o Options) bool { return o.PerPrincipal && len(o.Command) > 0 }

// ownedBy records that s was opened as ctx's caller, and reports whether
// it is one to keep per principal.
func (ss *sessions) ownedBy(ctx context.Context, s *session) bool {
	s.owner, s.as = oauth.Principal(ctx), oauth.CallerOf(ctx)
	return ss.keepsOwn(s)
}

// own returns the session ctx's caller calls in, and what to call
// when the call is over: s itself, unless s is a legacy session of a
// server reached per principal, or a session of a process per principal,
// where it is the caller's own.
func (ss *sessions) own(ctx context.Context, s *session) (*session, func(), error) {
	if !ss.keepsOwn(s) {
		return s, func() {}, nil
	}
	key := oauth.Principal(ctx)
	if ps, release := ss.pool.acquire(ofPrincipal(key), nil); ps != nil {
		return ps, release, nil
	}
	ch := ss.flights.DoChan("own:"+key, func() (any, error) {
		// Detached as the negotiation is: the principal's other calls wait
		// on it too. The context keeps the caller, whose token opens it.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ss.timeout)
		defer cancel()
		ps, err := ss.hs.openOwn(pctx, s)
		if err != nil {
			return nil, err
		}
		ss.ownedBy(ctx, ps)
		ss.pool.put(ofPrincipal(key), ps)
		return ps, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, nil, fmt.Errorf("upstream %s: a session of the caller's own: %w", ss.name, r.Err)
		}
		ps, release := ss.pool.acquire(ofPrincipal(key), r.Val.(*session))
		return ps, release, nil
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("upstream %s: waiting for a session of the caller's own: %w", ss.name, ctx.Err())
	}
}

// openOwn opens a session of the era of s for ctx's caller: on the
// server's one channel, or on a process of the caller's own, started for
// it (and ended again if the session cannot be opened).
func (h *handshake) openOwn(ctx context.Context, s *session) (*session, error) {
	if !h.process {
		return h.initialize(ctx, s.gen, s.Version)
	}
	gen, err := h.conn.Ready(ctx)
	if err != nil {
		return nil, err
	}
	var ps *session
	if s.Modern {
		ps, err = h.discover(ctx, gen)
	} else {
		ps, err = h.initialize(ctx, gen, s.Version)
	}
	if err != nil {
		_ = h.conn.EndSession(ctx, &transport.Exchange{Gen: gen})
	}
	return ps, err
}

// ownLive returns the live session of ctx's caller's own process, if it
// has one; none for a server not run as a process per principal.
func (ss *sessions) ownLive(ctx context.Context) *session {
	if !ss.process {
		return nil
	}
	if s := ss.pool.get(ofPrincipal(oauth.Principal(ctx))); s != nil && ss.conn.Alive(s.gen) {
		return s
	}
	return nil
}
