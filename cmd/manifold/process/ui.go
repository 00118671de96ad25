package process

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"time"

	"github.com/manifold-mcp/manifold/internal/mcp"
)

// The admin page is one HTML file with its style and script inline (no
// external assets: it must work on an isolated network), which polls
// /ui/state and redraws.
//
//go:embed ui.html
var uiHTML []byte

func serveUI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Everything is inline and same-origin; nothing else may run or load.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(uiHTML)
}

// uiState is what the admin page shows.
type uiState struct {
	Version       string       `json:"version"`
	Uptime        float64      `json:"uptimeSeconds"`
	Ready         bool         `json:"ready"`
	Upstreams     []uiUpstream `json:"upstreams"`
	Sessions      int          `json:"sessions"`     // in use (openSessions)
	SessionsHeld  int          `json:"sessionsHeld"` // kept until their idle timeout
	Subscriptions int          `json:"subscriptions"`
	Redis         *uiRedis     `json:"redis"` // null without Redis
	Cache         uiCache      `json:"cache"`
	Endpoints     []uiEndpoint `json:"endpoints"`
	// Totals since start and the last minutes' History, to an audience
	// that sees every upstream (they count the requests of all).
	Totals  *uiTraffic `json:"totals,omitempty"`
	History []uiMinute `json:"history,omitempty"`
}

type uiUpstream struct {
	Name      string   `json:"name"`
	Transport string   `json:"transport"`
	Protocol  string   `json:"protocol"`
	State     string   `json:"state"`
	Required  bool     `json:"required"`
	LastError string   `json:"lastError"`
	LastErrAt string   `json:"lastErrorAt"`
	P50ms     float64  `json:"p50ms"`
	P99ms     float64  `json:"p99ms"`
	PerSecond float64  `json:"callsPerSecond"`
	Cache     uiCache  `json:"cache"`
	OAuth     *uiOAuth `json:"oauth,omitempty"` // an OAuth upstream's
}

// uiOAuth is what an operator sees of an OAuth upstream (this replica's
// figures): never a token, a state or a link.
type uiOAuth struct {
	Grants             int    `json:"grants"`
	Pending            int    `json:"pending"`
	LastRefreshFailure string `json:"lastRefreshFailure"`
	LastRefreshAt      string `json:"lastRefreshAt"`
}

// uiCache holds hit ratios: the share of lookups each tier answered.
type uiCache struct {
	Lookups     uint64  `json:"lookups"`
	MemoryRatio float64 `json:"memoryHitRatio"`
	RedisRatio  float64 `json:"redisHitRatio"`
}

type uiRedis struct {
	BreakerOpen   bool   `json:"breakerOpen"`
	Errors        uint64 `json:"errors"`
	WritesDropped uint64 `json:"writesDropped"`
}

var startedAt = time.Now()

// state is what a may see: the rows, and the cache's ratios over them, of
// the upstreams it sees; the process's own figures are not an upstream's.
func (p *Process) state(a audience) uiState {
	r := p.readiness(a)
	st := p.cache.Stats()
	s := uiState{Version: mcp.BuildVersion, Uptime: time.Since(startedAt).Seconds(), Ready: r.Ready,
		Sessions: p.openSessions(), SessionsHeld: p.sessions.Len(), Subscriptions: p.hub.Open(), Upstreams: []uiUpstream{}}
	var mem, red, total uint64
	for _, u := range p.upstreams.Load().All() {
		if !a.sees(u.Name()) {
			continue
		}
		us := u.Status()
		cs := st.Upstreams[u.Name()]
		lookups := cs.MemoryHits + cs.RedisHits + cs.Misses
		mem, red, total = mem+cs.MemoryHits, red+cs.RedisHits, total+lookups
		row := uiUpstream{Name: u.Name(), Transport: us.Transport, Protocol: us.Protocol, State: us.State.String(),
			Required: r.Upstreams[u.Name()].Required, LastError: us.LastError,
			P50ms: ms(us.P50), P99ms: ms(us.P99), PerSecond: us.PerSecond, Cache: ratios(cs.MemoryHits, cs.RedisHits, lookups)}
		if !us.LastErrAt.IsZero() {
			row.LastErrAt = us.LastErrAt.UTC().Format(time.RFC3339)
		}
		row.OAuth = uiOf(u.OAuth())
		s.Upstreams = append(s.Upstreams, row)
	}
	s.Cache = ratios(mem, red, total)
	s.Endpoints = p.endpointsSeenBy(a)
	if a.all {
		totals, history := p.traffic.snapshot()
		s.Totals, s.History = &totals, history
	}
	if st.Redis != nil {
		s.Redis = &uiRedis{BreakerOpen: st.Redis.BreakerOpen, Errors: st.Redis.Errors, WritesDropped: st.Redis.WritesDropped}
	}
	return s
}

// openSessions counts the legacy sessions in use: those used within two
// keep-alive intervals (an open stream touches its session at each), at
// most the idle timeout. A client that leaves without DELETE stops
// counting then, not when its session expires.
func (p *Process) openSessions() int {
	return p.sessions.Active(min(2*p.cfg.Subscriptions.KeepAlive, p.cfg.Sessions.IdleTimeout))
}

func ratios(mem, red, lookups uint64) uiCache {
	c := uiCache{Lookups: lookups}
	if lookups > 0 {
		c.MemoryRatio = float64(mem) / float64(lookups)
		c.RedisRatio = float64(red) / float64(lookups)
	}
	return c
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (p *Process) uiState(w http.ResponseWriter, a audience) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(p.state(a))
}
