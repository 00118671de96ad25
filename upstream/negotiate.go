package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// callerMustAct reports a failure that is no failure of the server: the
// request was never sent for want of its caller's authorization (a consent
// to give, or a token that could not be had), or the server answered and
// its caller must act first.
func callerMustAct(err error) bool {
	return oauth.Unsent(err)
}

// probeTimeout bounds a server/discover probe: a legacy stdio server may
// simply never answer a method it does not know.
const probeTimeout = 5 * time.Second

// handshake opens sessions: it negotiates the server's era (a
// server/discover probe for a modern server, falling back to the legacy
// initialize, unless Options.Protocol pins the revision), or opens a
// session of a known era (initializeAs, openOwn). It keeps none: the
// sessions it opens are kept in the pool (sessions.go).
type handshake struct {
	x        *exchanger
	conn     transport.Conn
	log      *slog.Logger
	protocol string // Options.Protocol: the revision pinned, or "" or "auto"
	timeout  time.Duration
	client   mcp.Implementation // Options.ClientInfo, as initialize names Manifold
	process  bool               // a stdio server run as a process per principal
}

func (h *handshake) negotiate(ctx context.Context) (s *session, err error) {
	gen, err := h.conn.Ready(ctx)
	if err != nil {
		return nil, err
	}
	if h.process {
		defer func() {
			if err != nil {
				_ = h.conn.EndSession(ctx, &transport.Exchange{Gen: gen}) // started for this negotiation alone
			}
		}()
	}
	switch {
	case h.protocol == mcp.Version:
		return h.discover(ctx, gen)
	case mcp.IsLegacy(h.protocol):
		return h.initializeOn(ctx, gen, h.protocol)
	}
	if h.conn.Wire() == WireSSE {
		// HTTP+SSE servers predate server/discover.
		return h.initialize(ctx, gen, mcp.Legacy[0])
	}
	pctx, cancel := context.WithTimeout(ctx, min(probeTimeout, h.timeout))
	s, err = h.discover(pctx, gen)
	cancel()
	if err == nil || callerMustAct(err) {
		return s, err
	}
	if ctx.Err() != nil {
		return nil, err
	}
	h.log.Debug("server/discover probe failed; trying legacy initialize", "err", err)
	return h.initializeOn(ctx, gen, mcp.Legacy[0])
}

// initializeOn is initialize and, with transport auto, the fallback the
// specification describes: when Streamable HTTP refuses the POST (404,
// 405), the HTTP+SSE transport on the same URL, kept only if its stream
// opens.
func (h *handshake) initializeOn(ctx context.Context, gen uint64, version string) (*session, error) {
	s, err := h.initialize(ctx, gen, version)
	if err == nil {
		return s, nil
	}
	sseGen, ok, rerr := h.conn.FallBack(ctx, err)
	if !ok {
		return s, err
	}
	if rerr != nil {
		return nil, fmt.Errorf("%w (and no HTTP+SSE stream there: %w)", err, rerr)
	}
	return h.initialize(ctx, sseGen, version)
}

// discover probes for a modern server.
func (h *handshake) discover(ctx context.Context, gen uint64) (*session, error) {
	s := &session{Info: Info{Version: mcp.Version, Modern: true}, gen: gen}
	params := h.x.tr.params(ctx, s, &mcp.Request{Method: mcp.MethodDiscover, Meta: jsonrpc.Object{}})
	msg, err := h.x.carry(ctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: h.x.nextID(), Method: mcp.MethodDiscover, Params: params},
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
func (h *handshake) initialize(ctx context.Context, gen uint64, version string) (*session, error) {
	return h.initializeAs(ctx, gen, version, json.RawMessage(`{"sampling":{},"elicitation":{}}`))
}

// initializeAs is initialize, declaring caps.
func (h *handshake) initializeAs(ctx context.Context, gen uint64, version string, caps json.RawMessage) (*session, error) {
	params := jsonrpc.Object{}
	_ = params.Set("protocolVersion", version)
	params["capabilities"] = caps
	_ = params.Set("clientInfo", h.client)
	msg, err := h.x.carry(ctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: h.x.nextID(), Method: mcp.MethodInitialize, Params: params.Marshal()},
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
	if err := h.conn.Send(ctx, s.exchangeFor(init)); err != nil {
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	if s.Capabilities.Logging != nil {
		h.logEverything(ctx, s)
	}
	return s, nil
}

// logEverything asks a legacy server to send log messages of every level
// on the session Manifold shares among its callers, each of whom then gets
// those at its own level (mcp.LogAllowed).
func (h *handshake) logEverything(ctx context.Context, s *session) {
	params, _ := json.Marshal(map[string]string{"level": mcp.LogLevels[0]})
	r, err := h.x.carry(ctx, &transport.Exchange{
		Msg:     jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: h.x.nextID(), Method: mcp.MethodSetLevel, Params: params},
		Version: s.Version, Session: s.id, Gen: s.gen,
	})
	if err != nil || r.Error != nil {
		h.log.Debug("upstream refused logging/setLevel", "err", err)
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
