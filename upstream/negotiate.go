package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// session returns the current negotiation, establishing one if needed.
// Concurrent callers share one probe.
func (u *Upstream) session(ctx context.Context) (*session, error) {
	if s := u.pool.get(theServer); s != nil && u.conn.Alive(s.gen) {
		return s, nil
	}
	if s := u.ownLive(ctx); s != nil {
		return s, nil // its caller's process, though the latest negotiation's ended
	}
	// One negotiation for every caller, but one per principal toward a
	// server reached with each caller's own credential: there a failure
	// is its principal's alone (a consent to give, with a link made for
	// that principal, which no one else may be shown).
	key := "probe"
	if u.o.PerPrincipal {
		key = "probe:" + oauth.Principal(ctx)
	}
	ch := u.probe.DoChan(key, func() (any, error) {
		// Detached from the first caller's context: its cancellation must
		// not fail the probe that other callers wait on.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.o.Timeout)
		defer cancel()
		s, err := u.negotiate(pctx)
		if err != nil {
			// Every process working says nothing of the server's health; a
			// consent to ask for is the server's answer (health.outcome).
			if !errors.Is(err, transport.ErrChildrenBusy) {
				u.health.Failure(err)
			}
			return nil, err
		}
		if u.o.PerPrincipal && u.ownedBy(pctx, s) {
			u.pool.put(ofPrincipal(s.owner), s) // its negotiator's own session (own.go)
		}
		u.pool.put(theServer, s)
		u.mu.Lock()
		u.known = &s.Capabilities
		if u.last != "" && u.last != s.Version {
			u.eraChanges.Add(1)
		}
		u.last = s.Version
		u.mu.Unlock()
		// Up only once the session is there: whoever sees Up finds its
		// capabilities.
		u.health.success()
		u.log.Info("upstream ready", "transport", u.wire(), "protocol", s.Version, "server", s.ServerInfo.Name, "serverVersion", s.ServerInfo.Version)
		return s, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, fmt.Errorf("upstream %s: %w", u.o.Name, r.Err)
		}
		return r.Val.(*session), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("upstream %s: waiting for negotiation: %w", u.o.Name, ctx.Err())
	}
}

// callerMustAct reports a failure that is no failure of the server: the
// request was never sent for want of its caller's authorization (a consent
// to give, or a token that could not be had), or the server answered and
// its caller must act first.
func callerMustAct(err error) bool {
	return oauth.Unsent(err)
}

// forget drops s if it is still the negotiated session, so the next call
// negotiates again.
func (u *Upstream) forget(s *session) { u.pool.dropServer(s) }

// probeTimeout bounds a server/discover probe: a legacy stdio server may
// simply never answer a method it does not know.
const probeTimeout = 5 * time.Second

func (u *Upstream) negotiate(ctx context.Context) (s *session, err error) {
	gen, err := u.conn.Ready(ctx)
	if err != nil {
		return nil, err
	}
	if u.processPerPrincipal() {
		defer func() {
			if err != nil {
				_ = u.conn.EndSession(ctx, &transport.Exchange{Gen: gen}) // started for this negotiation alone
			}
		}()
	}
	switch {
	case u.o.Protocol == mcp.Version:
		return u.discover(ctx, gen)
	case mcp.IsLegacy(u.o.Protocol):
		return u.initializeOn(ctx, gen, u.o.Protocol)
	}
	if u.wire() == WireSSE {
		// HTTP+SSE servers predate server/discover.
		return u.initialize(ctx, gen, mcp.Legacy[0])
	}
	pctx, cancel := context.WithTimeout(ctx, min(probeTimeout, u.o.Timeout))
	s, err = u.discover(pctx, gen)
	cancel()
	if err == nil || callerMustAct(err) {
		return s, err
	}
	if ctx.Err() != nil {
		return nil, err
	}
	u.log.Debug("server/discover probe failed; trying legacy initialize", "err", err)
	return u.initializeOn(ctx, gen, mcp.Legacy[0])
}

// initializeOn is initialize and, with transport auto, the fallback the
// specification describes: when Streamable HTTP refuses the POST (404,
// 405), the HTTP+SSE transport on the same URL, kept only if its stream
// opens.
func (u *Upstream) initializeOn(ctx context.Context, gen uint64, version string) (*session, error) {
	s, err := u.initialize(ctx, gen, version)
	if err == nil {
		return s, nil
	}
	sseGen, ok, rerr := u.conn.FallBack(ctx, err)
	if !ok {
		return s, err
	}
	if rerr != nil {
		return nil, fmt.Errorf("%w (and no HTTP+SSE stream there: %w)", err, rerr)
	}
	return u.initialize(ctx, sseGen, version)
}

// wire names the transport the upstream is spoken to over now.
func (u *Upstream) wire() string { return u.conn.Wire() }

// discover probes for a modern server.
func (u *Upstream) discover(ctx context.Context, gen uint64) (*session, error) {
	s := &session{Info: Info{Version: mcp.Version, Modern: true}, gen: gen}
	params := u.params(ctx, s, &mcp.Request{Method: mcp.MethodDiscover, Meta: jsonrpc.Object{}})
	msg, err := u.carry(ctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.nextID(), Method: mcp.MethodDiscover, Params: params},
		Version: mcp.Version, Gen: gen, Idempotent: true,
	})
	if err != nil {
		return nil, err
	}
	if msg.Error != nil {
		if msg.Error.Code == jsonrpc.CodeUnsupportedVersion && supports(msg.Error.Data, mcp.Version) {
			// A modern server that rejected something else about the
			// probe: it is modern all the same.
			return s, nil
		}
		return nil, fmt.Errorf("server/discover: %w", msg.Error)
	}
	var r struct {
		SupportedVersions []string                   `json:"supportedVersions"`
		Capabilities      mcp.Capabilities           `json:"capabilities"`
		Instructions      string                     `json:"instructions"`
		Meta              map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(msg.Result, &r); err != nil {
		return nil, fmt.Errorf("server/discover result: %w", err)
	}
	s.Instructions = r.Instructions
	if !contains(r.SupportedVersions, mcp.Version) {
		return nil, fmt.Errorf("server/discover: server supports %v, not %s", r.SupportedVersions, mcp.Version)
	}
	s.Capabilities, s.Versions = r.Capabilities, r.SupportedVersions
	if raw, ok := r.Meta[mcp.MetaServerInfo]; ok {
		_ = json.Unmarshal(raw, &s.ServerInfo)
	}
	return s, nil
}

// initialize runs the legacy handshake, offering version. Manifold can put
// a legacy server's questions to the caller of the request that asks them
// (it answers them itself when nobody can), so it says it takes them.
func (u *Upstream) initialize(ctx context.Context, gen uint64, version string) (*session, error) {
	return u.initializeAs(ctx, gen, version, json.RawMessage(`{"sampling":{},"elicitation":{}}`))
}

// initializeAs is initialize, declaring caps.
func (u *Upstream) initializeAs(ctx context.Context, gen uint64, version string, caps json.RawMessage) (*session, error) {
	params := jsonrpc.Object{}
	_ = params.Set("protocolVersion", version)
	params["capabilities"] = caps
	_ = params.Set("clientInfo", u.o.ClientInfo)
	msg, err := u.carry(ctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.nextID(), Method: mcp.MethodInitialize, Params: params.Marshal()},
		Gen:     gen,
		Initial: true,
	})
	if err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	if msg.Error != nil {
		return nil, fmt.Errorf("initialize: %w", msg.Error)
	}
	var r struct {
		ProtocolVersion string             `json:"protocolVersion"`
		Capabilities    mcp.Capabilities   `json:"capabilities"`
		ServerInfo      mcp.Implementation `json:"serverInfo"`
	}
	if err := json.Unmarshal(msg.Result, &r); err != nil {
		return nil, fmt.Errorf("initialize result: %w", err)
	}
	if !mcp.IsLegacy(r.ProtocolVersion) {
		return nil, fmt.Errorf("initialize: server chose protocol %q, which Manifold does not speak", r.ProtocolVersion)
	}
	s := &session{
		Info: Info{Version: r.ProtocolVersion, Capabilities: r.Capabilities, ServerInfo: r.ServerInfo},
		id:   msg.SessionID, gen: gen,
	}
	init, _ := jsonrpc.Notification(mcp.NotifyInitialized, struct{}{})
	if err := u.conn.Send(ctx, s.exchangeFor(init)); err != nil {
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	if s.Capabilities.Logging != nil {
		u.logEverything(ctx, s)
	}
	return s, nil
}

// logEverything asks a legacy server to send log messages of every level
// on the session Manifold shares among its callers, each of whom then gets
// those at its own level (mcp.LogAllowed).
func (u *Upstream) logEverything(ctx context.Context, s *session) {
	params, _ := json.Marshal(map[string]string{"level": mcp.LogLevels[0]})
	r, err := u.carry(ctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.nextID(), Method: mcp.MethodSetLevel, Params: params},
		Version: s.Version, Session: s.id, Gen: s.gen,
	})
	if err != nil || r.Error != nil {
		u.log.Debug("upstream refused logging/setLevel", "err", err)
	}
}

func (s *session) exchangeFor(raw []byte) *transport.Exchange {
	ex := s.ref()
	_ = json.Unmarshal(raw, &ex.Msg)
	return ex
}

// ref names s to its transport: an exchange of no message in it.
func (s *session) ref() *transport.Exchange {
	return &transport.Exchange{Version: s.Version, Session: s.id, Gen: s.gen}
}
