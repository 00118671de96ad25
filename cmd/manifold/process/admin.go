package process

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/manifold-mcp/manifold/router/frontend"
	"github.com/manifold-mcp/manifold/upstream"
)

// adminMux serves the operational endpoints on the admin listener, where
// no authentication applies: the listener is the operators' own. Origin is
// still checked, so a web page cannot make a browser on the operator's
// machine reload the configuration.
func (p *Process) adminMux() http.Handler {
	mux := http.NewServeMux()
	p.ops(mux, true)
	return frontend.Chain(mux, frontend.Recover(p.log), frontend.CheckOrigin(p.cfg.AllowedOrigins))
}

// ops adds the operational endpoints to mux. On the main listener what
// names upstreams and their traffic (metrics, the admin page) needs what
// /mcp needs; liveness and readiness say little and stay open. Reload and
// profiles are served on the admin listener only.
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
	mux.HandleFunc("GET /readyz", p.readyz)
	mux.Handle("GET /metrics", guard(promhttp.HandlerFor(p.metrics.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{p}})))
	mux.Handle("GET /ui", guard(http.HandlerFunc(serveUI)))
	mux.Handle("GET /ui/state", guard(http.HandlerFunc(p.uiState)))
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

// slogPrinter is promhttp's error log, in ours.
type slogPrinter struct{ p *Process }

func (s slogPrinter) Println(v ...any) { s.p.log.Warn("metrics: " + fmt.Sprint(v...)) }

// readiness is /readyz's answer.
type readiness struct {
	Ready     bool                         `json:"ready"`
	Upstreams map[string]upstreamReadiness `json:"upstreams"`
}

type upstreamReadiness struct {
	State     string `json:"state"` // ready, connecting or down
	Protocol  string `json:"protocol"`
	Transport string `json:"transport"` // http or stdio
	Required  bool   `json:"required"`
}

// readiness is ready when every required upstream is ready and at least
// one upstream is: a replica that can serve nothing should not get
// traffic, one that lacks an optional upstream still serves the rest.
func (p *Process) readiness() readiness {
	required := *p.required.Load()
	r := readiness{Ready: true, Upstreams: map[string]upstreamReadiness{}}
	some := false
	for _, u := range p.upstreams.Load().All() {
		st := u.Status()
		ready := st.State == upstream.Ready
		some = some || ready
		if required[u.Name()] && !ready {
			r.Ready = false
		}
		r.Upstreams[u.Name()] = upstreamReadiness{State: st.State.String(), Protocol: st.Protocol, Transport: st.Transport, Required: required[u.Name()]}
	}
	r.Ready = r.Ready && some
	return r
}

func (p *Process) readyz(w http.ResponseWriter, _ *http.Request) {
	r := p.readiness()
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
	r := p.readiness()
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
