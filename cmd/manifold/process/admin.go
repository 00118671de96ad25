package process

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/router/frontend"
	"github.com/manifold-mcp/manifold/upstream"
)

// adminMux serves the operational endpoints on the admin listener, where
// no authentication applies: the listener is the operators' own. Host is
// checked as on the main listener, so a page that DNS-rebinds its name to
// the admin port reads nothing; Origin too, so a web page cannot make a
// browser on the operator's machine reload the configuration.
func (p *Process) adminMux() http.Handler {
	mux := http.NewServeMux()
	p.ops(mux, true)
	return frontend.Chain(mux, frontend.Recover(p.log), p.checkAdminHost(), frontend.CheckOrigin(p.cfg.AllowedOrigins))
}

// checkAdminHost is CheckHost with allowed_hosts and the name in
// admin.listen, which also admits any IP address: probes and scrapers
// address a replica by its IP, and rebinding needs a name to rebind (a page
// whose origin is an IP address only ever reaches that address).
func (p *Process) checkAdminHost() frontend.Link {
	allowed := slices.Clip(p.cfg.AllowedHosts)
	if host, _, err := net.SplitHostPort(p.cfg.Admin.Listen); err == nil && host != "" {
		allowed = append(allowed, host)
	}
	check := frontend.CheckHost(allowed)
	return func(next http.Handler) http.Handler {
		checked := check(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if net.ParseIP(strings.Trim(host, "[]")) != nil {
				next.ServeHTTP(w, r)
				return
			}
			checked.ServeHTTP(w, r)
		})
	}
}

// ops adds the operational endpoints to mux. On the main listener what
// names upstreams and their traffic (metrics, the admin page) needs what
// /mcp needs, and names only what the caller may know (audienceOf);
// liveness and readiness stay open, for probes, but readiness names the
// upstreams only to an authenticated caller. Reload and profiles are served
// on the admin listener only.
func (p *Process) ops(mux *http.ServeMux, admin bool) {
	guard := func(h http.Handler) http.Handler {
		if admin {
			return h
		}
		// As /mcp: a page in a browser must not reach them through DNS
		// rebinding or from another site.
		return frontend.Chain(h, frontend.CheckHost(p.cfg.AllowedHosts), frontend.CheckOrigin(p.cfg.AllowedOrigins),
			frontend.Authenticate(p.auth, p.resource, p.log))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /readyz", p.identified(admin, func(w http.ResponseWriter, r *http.Request) {
		p.readyz(w, p.audienceOf(r, admin))
	}))
	mux.Handle("GET /metrics", guard(p.metricsHandler(admin)))
	mux.Handle("GET /ui", guard(http.HandlerFunc(serveUI)))
	mux.Handle("GET /ui/state", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.uiState(w, p.audienceOf(r, admin))
	})))
	if !admin {
		return
	}
	mux.HandleFunc("POST /reload", p.reloadHandler)
	if p.cfg.Admin.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
}

// audience is what an operational answer may name: every upstream, or
// those in names (none, for a caller who is not authenticated).
type audience struct {
	all   bool
	names map[string]bool
	// endpoints are the curated endpoints it may use (the main one, /mcp,
	// is everyone's).
	endpoints map[string]bool
}

func (a audience) sees(upstream string) bool { return a.all || a.names[upstream] }

// uses reports whether the endpoint at path is one a may be told of.
func (a audience) uses(path string) bool {
	return a.all || path == upstream.MainPath || a.endpoints[path]
}

var everyone = audience{all: true}

// audienceOf is who asks r: on the admin listener (the operators' own),
// with authentication off, or as an operator (admin.operators), every
// upstream may be named; to another principal, those its access rules show
// it, as /mcp does (Set.For); to a caller not authenticated, none.
func (p *Process) audienceOf(r *http.Request, admin bool) audience {
	if admin || !p.auth.Enabled() {
		return everyone
	}
	pr := auth.From(r.Context())
	if pr == nil {
		return audience{}
	}
	if p.operator(pr.Claims) {
		return everyone
	}
	view := p.upstreams.Load().For(pr.Claims)
	a := audience{names: make(map[string]bool, len(view.Names())), endpoints: map[string]bool{}}
	for _, name := range view.Names() {
		a.names[name] = true
	}
	for _, v := range p.views {
		if v.Admits(pr.Claims) {
			a.endpoints[v.Path] = true
		}
	}
	return a
}

// operator reports whether claims match one of admin.operators.
func (p *Process) operator(claims map[string][]string) bool {
	for _, rule := range p.cfg.Admin.Operators {
		for _, v := range claims[rule.Claim] {
			if slices.Contains(rule.Values, v) {
				return true
			}
		}
	}
	return false
}

// identified passes the caller's principal on to h when its credentials
// are good, and the caller on without one otherwise: readiness answers
// probes, which carry none, and tells more to whom may know more.
func (p *Process) identified(admin bool, h http.HandlerFunc) http.Handler {
	if admin || !p.auth.Enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pr, err := p.auth.Authenticate(r.Context(), r); err == nil {
			r = r.WithContext(auth.WithPrincipal(r.Context(), pr))
		}
		h(w, r)
	})
}

// metricsHandler serves the Prometheus exposition: whole to an audience
// that sees everything, and otherwise without the series of the upstreams
// it does not see.
func (p *Process) metricsHandler(admin bool) http.Handler {
	opts := promhttp.HandlerOpts{ErrorLog: slogPrinter{p}}
	whole := promhttp.HandlerFor(p.metrics.reg, opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := p.audienceOf(r, admin)
		if a.all {
			whole.ServeHTTP(w, r)
			return
		}
		promhttp.HandlerFor(seenBy(p.metrics.reg, a), opts).ServeHTTP(w, r)
	})
}

// slogPrinter is promhttp's error log, in ours.
type slogPrinter struct{ p *Process }

func (s slogPrinter) Println(v ...any) { s.p.log.Warn("metrics: " + fmt.Sprint(v...)) }

// readiness is /readyz's answer.
type readiness struct {
	Ready     bool                         `json:"ready"`
	Upstreams map[string]upstreamReadiness `json:"upstreams,omitempty"`
}

type upstreamReadiness struct {
	State     string `json:"state"` // ready, connecting or down
	Protocol  string `json:"protocol"`
	Transport string `json:"transport"` // http or stdio
	Required  bool   `json:"required"`
}

// readiness is ready when every required upstream is ready and at least
// one upstream is: a replica that can serve nothing should not get
// traffic, one that lacks an optional upstream still serves the rest. It
// names the upstreams a sees.
func (p *Process) readiness(a audience) readiness {
	r := readiness{Ready: true, Upstreams: map[string]upstreamReadiness{}}
	some := false
	for _, u := range p.upstreams.Load().All() {
		st := u.Status()
		// One reached as each caller waits for its callers: not yet
		// reached is not down.
		ready := st.State == upstream.Ready || (u.PerPrincipal() && st.State == upstream.Connecting)
		some = some || ready
		if u.Required() && !ready {
			r.Ready = false
		}
		if !a.sees(u.Name()) {
			continue
		}
		r.Upstreams[u.Name()] = upstreamReadiness{State: st.State.String(), Protocol: st.Protocol, Transport: st.Transport, Required: u.Required()}
	}
	r.Ready = r.Ready && some
	return r
}

func (p *Process) readyz(w http.ResponseWriter, a audience) {
	r := p.readiness(a)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !r.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}

// noteReadiness logs each change of readiness, naming what is missing:
// with every upstream down, merged lists still answer (empty), and this is
// where an operator learns why. Upstreams call it on each change of state.
func (p *Process) noteReadiness() {
	r := p.readiness(everyone)
	var missing []string
	for name, u := range r.Upstreams {
		if u.State != "ready" && (u.Required || !r.Ready) {
			missing = append(missing, name+"="+u.State)
		}
	}
	slices.Sort(missing)
	now := "ready"
	if !r.Ready {
		now = "not ready: " + strings.Join(missing, ", ")
	}
	p.readyMu.Lock()
	defer p.readyMu.Unlock()
	if now == p.readyLast {
		return
	}
	p.readyLast = now
	if r.Ready {
		p.log.Info("manifold ready")
	} else {
		p.log.Warn("manifold " + now)
	}
}
