package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// sessions are the client's sessions, and which one a call goes over. All
// are kept in one pool (pool.go), under what each belongs to: the server's
// session, negotiated in one flight for every caller (one per principal
// toward a server reached with each caller's own credential, whose
// failure is that principal's alone); a legacy session of a caller's
// revision (era.go); a principal's own (own.go). Each of the last two is
// opened on its first call's need, in a flight of its own, by the
// handshake. A call acquires its session and releases it; one found no
// longer valid is dropped wherever it was kept, and ended in the
// background. What the latest negotiation learnt outlives its session
// (learnt): the capabilities stay known while the session is renewed.
type sessions struct {
	pool    pool
	flights singleflight.Group
	hs      *handshake
	conn    transport.Conn
	health  *health
	log     *slog.Logger
	learnt  learnt

	name         string
	timeout      time.Duration
	perPrincipal bool // Options.PerPrincipal: reached with each caller's own credential
	process      bool // a stdio server run as a process per principal
}

// newSessions keeps no session yet: the first call negotiates.
func newSessions(o Options, x *exchanger, h *health, log *slog.Logger) *sessions {
	process := processPerPrincipal(o)
	ss := &sessions{
		hs: &handshake{
			x: x, conn: x.conn, log: log,
			protocol: o.Protocol, timeout: o.Timeout, client: o.ClientInfo, process: process,
		},
		conn: x.conn, health: h, log: log,
		name: o.Name, timeout: o.Timeout, perPrincipal: o.PerPrincipal, process: process,
	}
	ss.pool = pool{alive: x.conn.Alive, end: ss.end, maxOwn: maxOwnSessions}
	return ss
}

// learnt is what the latest negotiation learnt of the server.
type learnt struct {
	mu      sync.Mutex
	known   *mcp.Capabilities // kept while the session is renewed
	version string
	changes atomic.Uint64 // how many times the version moved (Upstream.EraChanges)
}

// record notes what s was negotiated with.
func (l *learnt) record(s *session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.known = &s.Capabilities
	if l.version != "" && l.version != s.Version {
		l.changes.Add(1)
	}
	l.version = s.Version
}

func (l *learnt) capabilities() (mcp.Capabilities, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.known == nil {
		return mcp.Capabilities{}, false
	}
	return *l.known, true
}

func (l *learnt) protocol() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version
}

// server returns the current negotiation, establishing one if needed.
// Concurrent callers share one flight.
func (ss *sessions) server(ctx context.Context) (*session, error) {
	if s := ss.pool.get(theServer); s != nil && ss.conn.Alive(s.gen) {
		return s, nil
	}
	if s := ss.ownLive(ctx); s != nil {
		return s, nil // its caller's process, though the latest negotiation's ended
	}
	// One negotiation for every caller, but one per principal toward a
	// server reached with each caller's own credential: there a failure
	// is its principal's alone (a consent to give, with a link made for
	// that principal, which no one else may be shown).
	key := "probe"
	if ss.perPrincipal {
		key = "probe:" + oauth.Principal(ctx)
	}
	ch := ss.flights.DoChan(key, func() (any, error) {
		// Detached from the first caller's context: its cancellation must
		// not fail the probe that other callers wait on.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ss.timeout)
		defer cancel()
		return ss.establish(pctx)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, fmt.Errorf("upstream %s: %w", ss.name, r.Err)
		}
		return r.Val.(*session), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("upstream %s: waiting for negotiation: %w", ss.name, ctx.Err())
	}
}

// establish negotiates, keeps the session for the server (and for its
// negotiator, where sessions are a principal's own) and records the
// outcome in the health record.
func (ss *sessions) establish(ctx context.Context) (*session, error) {
	s, err := ss.hs.negotiate(ctx)
	if err != nil {
		// Every process working says nothing of the server's health; a
		// consent to ask for is the server's answer (health.outcome).
		if !errors.Is(err, transport.ErrChildrenBusy) {
			ss.health.Failure(err)
		}
		return nil, err
	}
	if ss.perPrincipal && ss.ownedBy(ctx, s) {
		ss.pool.put(ofPrincipal(s.owner), s) // its negotiator's own session (own.go)
	}
	ss.pool.put(theServer, s)
	ss.learnt.record(s)
	// Up only once the session is there: whoever sees Up finds its
	// capabilities.
	ss.health.success()
	ss.log.Info("upstream ready", "transport", ss.conn.Wire(), "protocol", s.Version, "server", s.ServerInfo.Name, "serverVersion", s.ServerInfo.Version)
	return s, nil
}

// acquire returns the session req goes over, from the pool, and what to
// call once the call is over: the negotiated session, or the one of the
// caller's revision (era.go), or one of the caller's own (own.go).
func (ss *sessions) acquire(ctx context.Context, req *mcp.Request, how How) (*session, func(), error) {
	s, err := ss.server(ctx)
	if err != nil {
		return nil, nil, err
	}
	return ss.own(ctx, ss.callerSession(ctx, s, req, how))
}

// forget drops s if it is still the negotiated session, so the next call
// negotiates again.
func (ss *sessions) forget(s *session) { ss.pool.dropServer(s) }

// end tells a legacy HTTP server, in the background, that a session
// Manifold stopped using is over, so sessions are not left behind.
func (ss *sessions) end(s *session) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ss.endNow(ctx, s)
	}()
}

// endNow ends s at a legacy HTTP server (DELETE) within ctx, as the
// principal that opened it toward a server reached per principal (only its
// token may end it); a principal's own process ends with its session.
func (ss *sessions) endNow(ctx context.Context, s *session) {
	if s.as != nil {
		ctx = s.as(ctx)
	}
	_ = ss.conn.EndSession(ctx, s.ref())
}

// close takes every session from the pool (none is kept after) and ends
// all but the negotiated one before it returns, a few at a time and within
// endingTime: a server must not keep sessions no one will use, and a
// process stopping must not leave requests behind, nor wait long on a
// server (or an authorization server) that does not answer. It returns the
// negotiated session's id, which the connection's close ends.
func (ss *sessions) close(ctx context.Context) (sid string) {
	s, others := ss.pool.close()
	ectx, cancel := context.WithTimeout(ctx, endingTime)
	defer cancel()
	var ending errgroup.Group
	ending.SetLimit(16)
	for _, o := range others {
		ending.Go(func() error { ss.endNow(ectx, o); return nil })
	}
	_ = ending.Wait()
	if s == nil || ss.keepsOwn(s) {
		return "" // none, or its negotiator's own session, ended with the others
	}
	return s.id
}
