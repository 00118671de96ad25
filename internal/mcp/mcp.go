// Package mcp holds the vocabulary of the Model Context Protocol that Manifold
// interprets: protocol revisions, method names, `_meta` keys, the HTTP header
// mirroring rules, and the few result fields a cache and a router must read.
//
// Everything else in a message is opaque to Manifold and stays raw JSON (see
// package jsonrpc). The types here are deliberately partial: they name the
// fields Manifold acts on, never the whole schema.
package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// Protocol revisions. Manifold serves Version downstream and speaks every
// revision in Legacy to upstreams.
const (
	Version = "2026-07-28"

	Version20251125 = "2025-11-25"
	Version20250618 = "2025-06-18"
	Version20250326 = "2025-03-26"
	Version20241105 = "2024-11-05"
)

// Legacy lists the session-based revisions Manifold can speak to an upstream,
// newest first: the order in which it offers them in `initialize`.
var Legacy = []string{Version20251125, Version20250618, Version20250326, Version20241105}

// HasVersionHeader reports whether revision v sends MCP-Protocol-Version on
// its HTTP requests (2025-06-18 and later).
func HasVersionHeader(v string) bool { return v != Version20250326 && v != Version20241105 }

// IsLegacy reports whether v is a session-based revision Manifold speaks.
func IsLegacy(v string) bool { return slices.Contains(Legacy, v) }

// Methods.
const (
	MethodDiscover         = "server/discover"
	MethodResourcesList    = "resources/list"
	MethodTemplatesList    = "resources/templates/list"
	MethodResourcesRead    = "resources/read"
	MethodSubscriptions    = "subscriptions/listen"
	MethodToolsList        = "tools/list"
	MethodToolsCall        = "tools/call"
	MethodPromptsList      = "prompts/list"
	MethodPromptsGet       = "prompts/get"
	MethodComplete         = "completion/complete"
	MethodInitialize       = "initialize"
	MethodPing             = "ping"
	MethodSubscribe        = "resources/subscribe"
	MethodUnsubscribe      = "resources/unsubscribe"
	MethodSetLevel         = "logging/setLevel"
	NotifyInitialized      = "notifications/initialized"
	NotifyCancelled        = "notifications/cancelled"
	NotifyProgress         = "notifications/progress"
	NotifyMessage          = "notifications/message"
	NotifyAcknowledged     = "notifications/subscriptions/acknowledged"
	NotifyResourcesChanged = "notifications/resources/list_changed"
	NotifyResourceUpdated  = "notifications/resources/updated"
	NotifyToolsChanged     = "notifications/tools/list_changed"
	NotifyPromptsChanged   = "notifications/prompts/list_changed"
	NotifyRootsListChanged = "notifications/roots/list_changed"
)

// Removed lists the methods 2026-07-28 dropped; a modern server answers them
// with -32601.
var Removed = []string{MethodInitialize, MethodPing, MethodSetLevel, MethodSubscribe, MethodUnsubscribe, NotifyRootsListChanged}

// SessionMethods are the requests of the legacy revisions that a session
// answers itself, outside the method table: Manifold serves them for its
// legacy callers, and counts them as it counts the others.
var SessionMethods = []string{MethodInitialize, MethodPing, MethodSetLevel, MethodSubscribe, MethodUnsubscribe}

// `_meta` keys.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
	MetaProgressToken      = "progressToken"
	MetaTraceparent        = "traceparent"
	MetaTracestate         = "tracestate"
	MetaBaggage            = "baggage"
)

// Result fields.
const (
	ResultTypeComplete      = "complete"
	ResultTypeInputRequired = "input_required"
	ScopePublic             = "public"
	ScopePrivate            = "private"
)

// Implementation identifies a client or server.
type Implementation struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// ServerInfo is how Manifold names itself in every result.
var ServerInfo = Implementation{Name: "manifold", Version: BuildVersion}

// BuildVersion is Manifold's own version, set when the binary is built
// (the Makefile passes `git describe` with -ldflags -X).
var BuildVersion = "dev"

// ResourcesCapability is the `resources` member of ServerCapabilities.
type ResourcesCapability struct {
	ListChanged bool `json:"listChanged,omitempty"`
	Subscribe   bool `json:"subscribe,omitempty"`
}

// ListCapability is the `tools` or `prompts` member of ServerCapabilities.
type ListCapability struct {
	ListChanged bool `json:"listChanged,omitempty"`
}

// Capabilities is the part of ServerCapabilities Manifold acts on; other
// members of an upstream's capabilities are not interpreted.
type Capabilities struct {
	Resources   *ResourcesCapability `json:"resources,omitempty"`
	Tools       *ListCapability      `json:"tools,omitempty"`
	Prompts     *ListCapability      `json:"prompts,omitempty"`
	Completions *struct{}            `json:"completions,omitempty"`
	Logging     *struct{}            `json:"logging,omitempty"`
}

// SubscriptionFilter is the `notifications` member of subscriptions/listen.
type SubscriptionFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

// NotFoundData is the data of a -32602 resource-not-found error.
type NotFoundData struct {
	URI string `json:"uri"`
}

// Request is one request as it travels through Manifold: decoded once by the
// downstream endpoint, routed, and re-encoded for each upstream's era. It is
// Manifold's equivalent of an *http.Request in a reverse proxy.
type Request struct {
	Method string
	// Params holds the params members other than `_meta`, undecoded.
	Params jsonrpc.Object
	// Meta is the caller's request `_meta`.
	Meta jsonrpc.Object
	// Raw is the params as the caller sent them, `_meta` included, when
	// Params and Meta were split from it (JSON Decode checked); nil
	// otherwise. It is a guide,
	// never the truth: the upstream's request is spliced from its bytes
	// where Params and Meta still hold them (a name or URI replaced,
	// members added), so whoever edits Params or Meta need not clear it.
	Raw json.RawMessage
	// Header is the caller's HTTP header; upstreams pick what their
	// forward_headers name.
	Header http.Header
	// Notify, if set, receives the request-scoped notifications (progress,
	// log messages) an upstream sends while serving the request.
	Notify func(*jsonrpc.Message)
	// Mirror is the caller's transport copy of request fields (the HTTP
	// headers of Streamable HTTP), which must agree with the body; nil when
	// the transport has none.
	Mirror Mirror
	// ParamHeaders are the Mcp-Param-* headers that mirror a tool call's
	// annotated arguments, for a modern HTTP upstream.
	ParamHeaders http.Header
	// Ask, if set, puts a question an upstream asked while serving the
	// request (a legacy server's sampling, elicitation or roots request)
	// to the caller, and returns the caller's result.
	Ask Ask
	// CallerVersion is the legacy revision the caller speaks (its
	// session's), "" for a 2026-07-28 caller: an upstream that speaks it
	// too may be asked in it.
	CallerVersion string
	// Shape, when set, is shared by every request of this one's shape (the
	// same bytes and headers but the id, as a frontend tells them): what
	// serving one of them taught the router, for the next.
	Shape *Shape
}

// A Shape holds what the router learned serving a request of one shape
// (its plan), for the next of that shape: the frontend keeps one per shape
// it validated, the router fills it. Its zero value holds nothing.
type Shape struct{ plan atomic.Value }

// Plan is what the router stored, nil if nothing.
func (s *Shape) Plan() any {
	if s == nil {
		return nil
	}
	return s.plan.Load()
}

// SetPlan stores plan, replacing any; the router stores one type only.
func (s *Shape) SetPlan(plan any) {
	if s != nil {
		s.plan.Store(plan)
	}
}

// Shaped reports whether a request of method is worth its Shape: only a
// read gets a plan (the router's replay), so a frontend tells no other's.
func Shaped(method string) bool { return method == MethodResourcesRead }

// Ask puts a server-to-client request to the caller of a request and
// returns its result; an error is the caller's refusal or absence.
type Ask func(ctx context.Context, q *jsonrpc.Message) (json.RawMessage, error)

// Questions are the server-to-client requests a caller may be asked, with
// the client capability each needs.
var Questions = map[string]string{
	"sampling/createMessage": "sampling",
	"elicitation/create":     "elicitation",
	"roots/list":             "roots",
}

// Mirror is a transport's own copy of request fields, which must agree with
// the body: the MCP-Protocol-Version, Mcp-Method, Mcp-Name and Mcp-Param-*
// headers of Streamable HTTP.
type Mirror interface {
	// Check reports a -32020 error unless the mirrored field (a header
	// name) is present once and, decoded, holds want.
	Check(field, want string) *jsonrpc.Error
	// Absent reports a -32020 error if the field is present.
	Absent(field string) *jsonrpc.Error
}

// NormalizeTTL reads a ttlMs hint the way a cache must: absent, negative or
// fractional-below-one values are 0 (stale at once), and absurdly large ones
// are capped at a year.
func NormalizeTTL(ms float64) int64 {
	const maxTTL = int64(365 * 24 * 3600 * 1000)
	switch {
	case ms <= 0:
		return 0
	case ms >= float64(maxTTL):
		return maxTTL
	}
	return int64(ms)
}

// NormalizeScope reads a cacheScope hint the way a shared cache must: only
// an exact "public" is public; missing, unknown or mis-cased is private.
func NormalizeScope(s string) string {
	if s == ScopePublic {
		return ScopePublic
	}
	return ScopePrivate
}

// LogLevels are the syslog severities of notifications/message, least
// severe first.
var LogLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// LogAllowed reports whether a caller that asked for level (its least
// severe) wants the log notification m; "" wants none. A legacy server whose
// session logs everything can so serve each caller at its own level.
func LogAllowed(level string, m *jsonrpc.Message) bool {
	want := slices.Index(LogLevels, level)
	if want < 0 {
		return false
	}
	var p struct {
		Level string `json:"level"`
	}
	_ = json.Unmarshal(m.Params, &p)
	return slices.Index(LogLevels, p.Level) >= want
}

// Declares reports whether the caller declared the client capability at
// path in its `_meta` (Declares("sampling"), Declares("elicitation",
// "url")): each step a member of an object, whatever its value. The
// capabilities are walked where they lie, not decoded.
func (r *Request) Declares(path ...string) bool {
	v, ok := r.Meta[MetaClientCapabilities], true
	for _, name := range path {
		if v, ok = jsonrpc.Member(v, name); !ok {
			return false
		}
	}
	return ok && v != nil
}
