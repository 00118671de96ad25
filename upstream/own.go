package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/manifold-mcp/manifold/internal/oauth"
)

// Sessions of their own, toward a server reached with each caller's own
// credential (Options.PerPrincipal, OAuth mode user). A server that keeps
// legacy sessions binds each to the user whose token opened it and refuses
// another user's request in it (the go-sdk answers 403 "session user
// mismatch"), as the specification's security guidance asks. So each
// principal's calls go in a session that principal opened: the one
// negotiated first, for the principal it was negotiated as, or one
// initialized for the principal on its first call, with its token. At most
// maxOwnSessions are kept; the least recently used is ended (DELETE) to
// make room, and its principal opens another on its next call. A modern
// server has no session, and a legacy one that gave no session id keeps
// nothing to bind: both are spoken to as before.

// maxOwnSessions bounds the sessions kept for principals other than the
// negotiating one: as many principals as call, which callers control.
const maxOwnSessions = 256

// owned is a principal's session and when it was last used.
type owned struct {
	s    *session
	used time.Time
}

// ownSession returns the session ctx's caller calls in: s, unless s is a
// legacy session (it has an id) of a server reached per principal, opened
// as another principal.
func (u *Upstream) ownSession(ctx context.Context, s *session) (*session, error) {
	if !u.o.PerPrincipal || s.Modern || s.id == "" {
		return s, nil
	}
	key := oauth.Principal(ctx)
	if key == s.owner {
		return s, nil
	}
	u.mu.Lock()
	o := u.own[key]
	if o != nil && u.conn.alive(o.s.gen) {
		o.used = time.Now()
		u.mu.Unlock()
		return o.s, nil
	}
	u.mu.Unlock()
	ch := u.probe.DoChan("own:"+key, func() (any, error) {
		// Detached as the negotiation is: the principal's other calls wait
		// on it too. The context keeps the caller, whose token opens it.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.o.Timeout)
		defer cancel()
		ps, err := u.initialize(pctx, s.gen, s.Version)
		if err != nil {
			return nil, err
		}
		ps.owner, ps.as = key, oauth.CallerOf(ctx)
		u.keepOwn(key, ps)
		return ps, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, fmt.Errorf("upstream %s: a session of the caller's own: %w", u.o.Name, r.Err)
		}
		return r.Val.(*session), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("upstream %s: waiting for a session of the caller's own: %w", u.o.Name, ctx.Err())
	}
}

// keepOwn keeps s as key's session, ending the least recently used one
// when maxOwnSessions are kept, and any session key had before.
func (u *Upstream) keepOwn(key string, s *session) {
	u.mu.Lock()
	var ended []*session
	if old := u.own[key]; old != nil {
		ended = append(ended, old.s)
	} else if len(u.own) >= maxOwnSessions {
		var lru string
		for k, o := range u.own {
			if lru == "" || o.used.Before(u.own[lru].used) {
				lru = k
			}
		}
		ended = append(ended, u.own[lru].s)
		delete(u.own, lru)
	}
	if u.own == nil {
		u.own = map[string]*owned{}
	}
	u.own[key] = &owned{s: s, used: time.Now()}
	u.mu.Unlock()
	for _, e := range ended {
		u.endSession(e)
	}
}

// forgetOwn drops s if it is a principal's own session, so that its next
// call opens another; it reports whether it was.
func (u *Upstream) forgetOwn(s *session) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k, o := range u.own {
		if o.s == s {
			delete(u.own, k)
			return true
		}
	}
	return false
}
