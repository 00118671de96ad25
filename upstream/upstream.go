// Package upstream is Manifold's client for one MCP server, whatever its era
// and transport: Streamable HTTP or stdio, 2026-07-28 or a session-based
// legacy revision.
//
// Callers speak the modern vocabulary only. An Upstream learns its server's
// era once (a server/discover probe, falling back to the legacy initialize
// handshake), remembers it, and translates each call: a modern server gets the
// caller's `_meta` and the mirrored headers, a legacy one gets a session and
// requests without the modern `_meta` keys, and its results come back with the
// fields a modern result must carry. When the remembered era stops working (a
// session the server forgot, a process that restarted, a server that was
// upgraded) the Upstream drops it and probes again, once per call.
//
// Transports share one small interface, conn, so the era logic is written
// once for HTTP and stdio.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/upstream/transport"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
)

// Response is a server's answer: a result or a JSON-RPC error. A Response
// with an error is an answer, not a failure; failures (network, timeout, a
// dead process) are returned as Go errors.
type Response struct {
	Result json.RawMessage
	Error  *jsonrpc.Error
}

// Info describes what the server said about itself when the era was learnt.
type Info struct {
	Version string
	Modern  bool
	// Versions are the revisions a modern server says it supports.
	Versions     []string
	Capabilities mcp.Capabilities
	ServerInfo   mcp.Implementation
	// Instructions are the server's own, as its server/discover gave them.
	Instructions string
}

// Options configure one Upstream: everything the client needs, in its own
// terms. Only the assembly knows the configuration file.
type Options struct {
	Name string
	// Options are what its transport needs: the URL and wire or the
	// command, headers, TLS, the HTTP transport and Authorize, retries,
	// timeouts and the bound of a message (transport.Options). Its
	// PerPrincipal means more here: the server is reached with each
	// caller's own credential (Authorize, OAuth mode user), or, with
	// Command, run as a process of each principal's own: nothing is asked
	// of it without a caller but its health (probe.go's knock), so it is
	// not negotiated with at start nor watched in the background.
	transport.Options

	// ForwardHeaders names the caller headers passed on.
	ForwardHeaders []string
	// Access, when set, admits only principals one of whose rules
	// matches; the others are not shown the upstream at all (Set.For).
	Access []AccessRule
	// KeyByPrincipal says the server answers per authenticated principal,
	// not per credential: it is forwarded none, or is configured so. Its
	// private cache entries are then keyed by the principal.
	KeyByPrincipal bool
	// OAuth is the OAuth client the server is reached through (Authorize
	// is its transport), nil if none: it belongs to the set the upstream
	// is in, and a reload's retirement of the upstream closes it.
	OAuth *oauth.Client
	// Required says readiness waits for the server to be ready.
	Required bool
	// Description is what the operator says of the server, shown to a
	// caller who has not authorized it (ConnectDescription).
	Description string

	// Protocol pins the revision; "" or "auto" probes for it.
	Protocol string
	// CallTimeout bounds a call of a method that runs work of unknown
	// length (a tool), 0 meaning Timeout.
	CallTimeout time.Duration
	// Filters decide, per list method (tools/list, prompts/list), which of
	// the server's names Manifold serves; a name not admitted is unknown.
	Filters map[string]Filter
	// ToolCache is the policy for caching the results of its read-only
	// tools; the zero value caches none.
	ToolCache ToolCache
	// DefaultTTL and DefaultScope stand in for the cache hints a legacy
	// server does not send.
	DefaultTTL   time.Duration
	DefaultScope string

	Logger *slog.Logger
	// ClientInfo is how Manifold names itself in initialize and to servers
	// when a caller sent no clientInfo.
	ClientInfo mcp.Implementation
	// OnEvent receives the changes the server announces: on subscription
	// streams, and (legacy) as untagged notifications. May be nil.
	OnEvent func(upstream string, ev Event)
	// Observe, if set, is told of every call that reached the exchange:
	// its method, how long it took, and its error (nil when the server
	// answered). Metrics hang here.
	Observe func(method string, d time.Duration, err error)
	// OnState, if set, is told of each change of the upstream's State.
	OnState func(upstream string, st State)
	// ProbeInterval is how often the server is asked, while it is down,
	// whether it is back (0: only when a call or the watch asks).
	ProbeInterval time.Duration
}

// The wire a URL upstream is spoken to over (Options.Wire), as the
// transport names it.
const (
	WireAuto  = transport.WireAuto
	WireHTTP  = transport.WireHTTP
	WireSSE   = transport.WireSSE
	WireStdio = transport.WireStdio
)

// StatusError is an HTTP answer that carried no JSON-RPC response: the
// server does not speak the era Manifold assumed, or is failing.
type StatusError = transport.StatusError

// Unreachable reports whether err, from Call, means the server could not
// be reached or failed on its side, as opposed to refusing the request:
// only then may a cache stand in with a stale answer (transport.Unreachable).
func Unreachable(err error) bool { return transport.Unreachable(err) }

// Upstream is a client for one configured server. It is safe for
// concurrent use. Its parts, each a type of its own: the exchange of
// messages over the connection and the server's questions (exchanger),
// the rewriting of a call into the server's era and of its answer back
// (translator), the sessions and their negotiation (sessions, handshake),
// the subscription that follows the hub's wishes (watch) and the health
// probe (prober).
type Upstream struct {
	o        Options
	log      *slog.Logger
	conn     transport.Conn
	health   *health
	inflight atomic.Int64 // calls under way, for Retire

	x        *exchanger
	sessions *sessions
	w        *watch
	prober   *prober

	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// session is what one era negotiation established.
type session struct {
	Info
	id  string // Mcp-Session-Id of a legacy HTTP session
	gen uint64 // the stdio process it belongs to
	// owner is the principal (oauth.Principal) the session was opened as,
	// toward a server reached with each caller's own credential (own.go),
	// and how to act as it (to end the session with its token).
	owner string
	as    oauth.As
}

// New builds the client. Nothing is contacted until the first call; a stdio
// process is started at once so its startup overlaps ours.
func New(o Options) (*Upstream, error) {
	o = withDefaults(o)
	info, err := json.Marshal(o.ClientInfo)
	if err != nil {
		return nil, fmt.Errorf("client info: %w", err)
	}
	u := &Upstream{o: o, log: o.Logger.With("upstream", o.Name)}
	u.health = newHealth(u.log, func(st State) {
		if o.OnState != nil {
			o.OnState(o.Name, st)
		}
	})
	u.x = &exchanger{
		name: o.Name, health: u.health, observe: o.Observe, peer: peerAttributes(o), unattributed: unattributed(o),
		tr: &translator{
			name: o.Name, info: info, forward: o.ForwardHeaders,
			ttl: o.DefaultTTL, scope: o.DefaultScope, private: processPerPrincipal(o),
		},
		emit: func(ev Event) {
			if o.OnEvent != nil {
				o.OnEvent(o.Name, ev)
			}
		},
	}
	u.conn, err = transport.New(o.Options, u.log, u.x.onServerMessage, u.health)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", o.Name, err)
	}
	u.x.conn = u.conn
	u.sessions = newSessions(o, u.x, u.health, u.log)
	u.w = newWatch(u.sessions, u.x, u.log, o.Timeout)
	u.prober = &prober{
		sessions: u.sessions, x: u.x, conn: u.conn, health: u.health, wake: u.w.wakeUp,
		interval: o.ProbeInterval, timeout: o.Timeout, perPrincipal: o.PerPrincipal, process: processPerPrincipal(o),
	}
	return u, nil
}

// DefaultMaxResponseBytes bounds a message from a server whose Options
// say no bound: upstreams[].max_response_bytes' default.
const DefaultMaxResponseBytes = 16 << 20

// withDefaults is o with what it leaves unset filled in.
func withDefaults(o Options) Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ClientInfo.Name == "" {
		o.ClientInfo = mcp.ServerInfo
	}
	if o.DefaultScope == "" {
		o.DefaultScope = mcp.ScopePrivate
	}
	if o.MaxResponseBytes <= 0 {
		// A bound of 0 would refuse every message (an Options built
		// without the configuration's default).
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return o
}

// Name is the configured name.
func (u *Upstream) Name() string { return u.o.Name }

// EraChanges counts the times the server was found speaking another
// protocol revision than before (an upgrade, a downgrade). Answers
// translated under one era are not reused under another, so it is part of
// cache keys. It never blocks and is stable from startup.
func (u *Upstream) EraChanges() uint64 { return u.sessions.learnt.changes.Load() }

// ForwardHeaders names the caller headers passed on to this upstream.
func (u *Upstream) ForwardHeaders() []string { return u.o.ForwardHeaders }

// AccessRule admits a principal whose claim Claim has one of Values.
type AccessRule struct {
	Claim  string
	Values []string
}

// Admits reports whether a principal with claims may use the upstream: any
// rule that matches admits it, and an upstream without rules admits all.
func (u *Upstream) Admits(claims map[string][]string) bool { return admits(u.o.Access, claims) }

// admits reports whether a rule of rules matches claims; no rule admits
// everyone.
func admits(rules []AccessRule, claims map[string][]string) bool {
	if len(rules) == 0 {
		return true
	}
	for _, r := range rules {
		for _, v := range claims[r.Claim] {
			if slices.Contains(r.Values, v) {
				return true
			}
		}
	}
	return false
}

// KeyByPrincipal reports whether the server answers per principal.
func (u *Upstream) KeyByPrincipal() bool { return u.o.KeyByPrincipal }

// Info returns what the server declared, probing it first if needed.
func (u *Upstream) Info(ctx context.Context) (Info, error) {
	ctx, cancel := context.WithTimeout(ctx, u.o.Timeout)
	defer cancel()
	s, err := u.sessions.server(ctx)
	if err != nil {
		return Info{}, err
	}
	return s.Info, nil
}

// State is the upstream's state alone: cheaper than Status.
func (u *Upstream) State() State { return u.health.current() }

// Status reports the upstream's health.
func (u *Upstream) Status() Status {
	st := u.health.status()
	st.Protocol = u.sessions.learnt.protocol()
	st.Transport = u.conn.Wire()
	return st
}

// How is what the router decided of one call, beyond what its caller asked
// (the request).
type How struct {
	// Alone says the answer is its legacy caller's alone: no cache keeps
	// it, so it may be asked in the caller's own revision where the server
	// speaks it (era.go), and is passed on as the server sent it.
	Alone bool
}

// alone reports whether req goes as how says for a caller of a legacy
// revision.
func (h How) alone(req *mcp.Request) bool { return h.Alone && req.CallerVersion != "" }

// Call sends req as how says and waits for the answer, within the
// configured timeout.
func (u *Upstream) Call(ctx context.Context, req *mcp.Request, how How) (*Response, error) {
	u.inflight.Add(1)
	defer u.inflight.Add(-1)
	timeout := u.o.Timeout
	if m, ok := mcp.Lookup(req.Method); ok && m.Long && u.o.CallTimeout > 0 {
		timeout = u.o.CallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		s, release, err := u.sessions.acquire(ctx, req, how)
		if err != nil {
			return nil, err
		}
		u.w.calling(ctx)
		msg, err := u.x.timed(ctx, s, req)
		release()
		// The era assumed no longer holds when a modern server says it does
		// not speak 2026-07-28, or a legacy session is answered by a modern
		// server, or a modern request is refused without a JSON-RPC body.
		// A legacy session is otherwise only renegotiated when the server
		// forgot it (404): a plain 400 there is an answer, not an era change.
		if err == nil && msg.Error != nil && msg.Error.Code == jsonrpc.CodeUnsupportedVersion && supports(msg.Error.Data, mcp.Version) != s.Modern {
			err = errEraChanged
		}
		if errors.Is(err, transport.ErrSessionGone) || errors.Is(err, errEraChanged) || s.Modern && eraSuspect(err) && ctx.Err() == nil {
			u.log.Info("upstream session no longer valid; negotiating again", "reason", err)
			u.sessions.pool.drop(s)
			if !errors.Is(err, transport.ErrSessionGone) {
				u.sessions.end(s)
			}
			lastErr = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %s: %w", u.o.Name, req.Method, err)
		}
		return u.x.tr.response(s, req, how, msg), nil
	}
	return nil, fmt.Errorf("upstream %s: %s: %w", u.o.Name, req.Method, lastErr)
}

var tracer = otel.Tracer("github.com/manifold-mcp/manifold/upstream")

func clientSpan() []trace.SpanStartOption {
	return []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
}

var errEraChanged = errors.New("server changed protocol era")

// eraSuspect reports an HTTP answer that suggests the server no longer
// speaks the era Manifold negotiated: a rejection without a JSON-RPC body.
// A 5xx says nothing about the era and is not suspect.
func eraSuspect(err error) bool {
	if err == nil {
		return false // before errors.As, whose target escapes: every call would allocate
	}
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Status {
	case 400, 404, 405, 406, 415:
		return true
	}
	return false
}

// Watch replaces the set of resource URIs (the upstream's own) to be told
// about, and returns its version for WaitWatched. The upstream subscription
// follows it; on a modern upstream the new subscription is acknowledged
// before the old one is closed, so no update falls in between.
func (u *Upstream) Watch(uris []string) uint64 { return u.w.set(uris) }

// WaitWatched waits until the upstream subscription carries version v of
// the watched set (or a later one), or ctx ends. It reports which.
func (u *Upstream) WaitWatched(ctx context.Context, v uint64) bool { return u.w.carries(ctx, v) }

// Capabilities returns what the server declared, without waiting: ok is
// false until the first negotiation. A session the server forgot (it
// restarted) leaves its capabilities in place until the next negotiation
// replaces them, so a caller arriving meanwhile is not told the server
// serves nothing.
func (u *Upstream) Capabilities() (mcp.Capabilities, bool) { return u.sessions.learnt.capabilities() }

// MayAsk reports whether the server may put questions (sampling,
// elicitation, roots) in the middle of a call: a legacy server, or one not
// negotiated with yet. A modern server asks by answering input_required.
func (u *Upstream) MayAsk(req *mcp.Request, how How) bool {
	if u.sessions.speaksCallersEra(req, how) {
		return true // over a legacy session of the caller's revision (era.go)
	}
	s := u.sessions.pool.get(theServer)
	return s == nil || !s.Modern
}

// OAuth is the upstream's OAuth client (Options.OAuth), nil if none.
func (u *Upstream) OAuth() *oauth.Client { return u.o.OAuth }

// Required reports whether readiness waits for the server.
func (u *Upstream) Required() bool { return u.o.Required }

// PerPrincipal reports whether the server is reached with each caller's
// own credential (Options.PerPrincipal): it is watched only for callers.
func (u *Upstream) PerPrincipal() bool { return u.o.PerPrincipal }

// Exposes reports whether the server's name in list (tools/list,
// prompts/list) is served through Manifold.
func (u *Upstream) Exposes(list, name string) bool {
	f, ok := u.o.Filters[list]
	return !ok || f.Admits(name)
}

func supports(data json.RawMessage, version string) bool {
	var d struct {
		Supported []string `json:"supported"`
	}
	return json.Unmarshal(data, &d) == nil && contains(d.Supported, version)
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
