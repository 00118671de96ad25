package upstream

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/manifold-mcp/manifold/internal/mcp"
)

// The caller's era, for what no cache keeps. A server that speaks both eras
// does more work for a 2026-07-28 request than for a 2025-11-25 one (it
// checks and extracts the modern `_meta`), and a legacy caller's request
// reached it modern only to be translated back. So a request whose answer
// is not cached (a tool call, a prompt, a completion), from a caller of a
// legacy revision the server also accepts, goes in that revision, on a
// session of its own, negotiated once per revision; what is cached (reads,
// lists) keeps the revision that carries the cache hints. Only for a
// caller that takes no questions (it declared no sampling, elicitation or
// roots): a server answering statelessly cannot ask a legacy session
// anything, while a modern request can ask through input_required; the
// session says it takes none either. Over HTTP only: on a stdio channel
// there is one session, the modern one. Never to a server reached with
// each caller's own credential (Options.PerPrincipal): the legacy session
// is one per revision, negotiated with the first caller's token and used
// for every caller after, where a modern request has no session and goes
// with its own caller's token alone.

// callerSession returns the session req should go over: s, or the legacy
// session of the caller's revision when the server speaks it and the
// answer is not cached.
func (ss *sessions) callerSession(ctx context.Context, s *session, req *mcp.Request, how How) *session {
	if !ss.speaksEra(s, req, how) {
		return s
	}
	v := req.CallerVersion
	if ls := ss.pool.get(ofRevision(v)); ls != nil {
		return ls
	}
	ch := ss.flights.DoChan("era:"+v, func() (any, error) {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ss.timeout)
		defer cancel()
		ls, err := ss.hs.initializeAs(pctx, 0, v, json.RawMessage(`{}`))
		if err != nil {
			ss.log.Debug("upstream refused a session in the caller's revision; speaking 2026-07-28", "version", v, "err", err)
			return nil, err
		}
		ss.pool.put(ofRevision(v), ls)
		return ls, nil
	})
	select {
	case r := <-ch:
		if r.Err == nil {
			return r.Val.(*session)
		}
	case <-ctx.Done():
	}
	return s
}

// speaksCallersEra reports whether req would go over a legacy session of
// its caller's revision (callerSession), on which the server may ask its
// caller questions in the middle of the call.
func (ss *sessions) speaksCallersEra(req *mcp.Request, how How) bool {
	s := ss.pool.get(theServer)
	return s != nil && ss.speaksEra(s, req, how)
}

// speaksEra reports whether req goes in its caller's revision to the
// server of modern session s: a legacy revision of Streamable HTTP that
// the server supports, for an answer no cache keeps.
func (ss *sessions) speaksEra(s *session, req *mcp.Request, how How) bool {
	v := req.CallerVersion
	return how.alone(req) && mcp.HasVersionHeader(v) && s.Modern && slices.Contains(s.Versions, v) &&
		ss.conn.Wire() == WireHTTP && !ss.perPrincipal && !takesQuestions(req)
}

// takesQuestions reports whether the caller declared a capability a
// server's question needs.
func takesQuestions(req *mcp.Request) bool {
	for _, need := range mcp.Questions {
		if req.Declares(need) {
			return true
		}
	}
	return false
}
