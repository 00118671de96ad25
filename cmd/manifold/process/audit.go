package process

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/mcptrace"
	"github.com/manifold-mcp/manifold/router"
	"github.com/manifold-mcp/manifold/router/frontend"
	"github.com/manifold-mcp/manifold/upstream"
)

// openAudit opens the audit log and counts its losses in the metrics; nil
// when audit.file is empty.
func openAudit(cfg *config.Config, reg prometheus.Registerer) (*audit.Log, error) {
	if cfg.Audit.File == "" {
		return nil, nil
	}
	l, err := audit.Open(cfg.Audit.File)
	if err != nil {
		return nil, err
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "manifold_audit_dropped_total", Help: "Audit records dropped because the writer fell behind."},
			func() float64 { return float64(l.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "manifold_audit_failed_total", Help: "Audit records or flushes the file refused."},
			func() float64 { return float64(l.Failed()) }))
	return l, nil
}

// auditLink is the router link writing one record per request, or none
// without an audit log.
func (p *Process) auditLink() []router.Link {
	if p.audit == nil {
		return nil
	}
	return []router.Link{router.Noted(p.audited)}
}

// audited writes the record of one request: names and outcomes, never a
// token, a header value or an argument.
func (p *Process) audited(ctx context.Context, req *mcp.Request, n *router.Note, d time.Duration, err error) {
	rec := audit.Record{
		Time: time.Now().UTC(), Endpoint: upstream.ViewOf(ctx).Name(), Method: req.Method, Upstream: n.Upstream(), Tier: n.Tier(),
		Outcome: router.Code(err), DurationMs: float64(d.Microseconds()) / 1000,
	}
	if pr := auth.From(ctx); pr != nil {
		rec.Principal = pr.ID
	}
	if sid := router.SessionOf(ctx); sid != "" {
		rec.Session = mcptrace.SessionDigest(sid)
	}
	if uri, ok := req.Params.Str("uri"); ok {
		rec.Target = uri
	} else if name, ok := req.Params.Str("name"); ok {
		rec.Target = name
	}
	p.audit.Write(rec)
}

// reopenAudit opens the audit file again: after logrotate moved it, on
// SIGHUP.
func (p *Process) reopenAudit() {
	if p.audit == nil {
		return
	}
	if err := p.audit.Reopen(); err != nil {
		p.log.Error("reopening the audit log", "err", err)
	}
}

func (p *Process) closeAudit() {
	if p.audit == nil {
		return
	}
	if err := p.audit.Close(); err != nil {
		p.log.Warn(fmt.Sprintf("closing the audit log: %v", err))
	}
}

// auditRefused is the HTTP link that writes a record for each request the
// router never reported: refused by a link (401, 403, 413, 429), invalid,
// or answered by the frontend itself (a legacy initialize, a listen
// stream, once it ends). Such a record has the HTTP status as its outcome
// ("http-401") and the Mcp-Method header, or the HTTP method, as its
// method; it names no principal, and the endpoint of view v (whether or
// not the caller may know it exists). Without an audit log it is no link.
func (p *Process) auditRefused(v *upstream.View) frontend.Link {
	if p.audit == nil {
		return func(next http.Handler) http.Handler { return next }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ctx, reported := router.WithReported(r.Context())
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r.WithContext(ctx))
			if reported.Load() {
				return
			}
			method := r.Header.Get(mcp.HeaderMethod)
			if method == "" || len(method) > 64 {
				method = r.Method
			}
			p.audit.Write(audit.Record{Time: time.Now().UTC(), Endpoint: v.Name(), Method: method, Outcome: "http-" + strconv.Itoa(sw.status),
				DurationMs: float64(time.Since(start).Microseconds()) / 1000})
		})
	}
}

// statusWriter remembers the status written; Unwrap lets
// http.ResponseController reach the writer's Flush and deadlines, so
// event streams work through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
