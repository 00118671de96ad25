package process

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router"
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
		Time: time.Now().UTC(), Method: req.Method, Upstream: n.Upstream(), Tier: n.Tier(),
		Outcome: router.Code(err), DurationMs: float64(d.Microseconds()) / 1000,
	}
	if pr := auth.From(ctx); pr != nil {
		rec.Principal = pr.ID
	}
	if sid := router.SessionOf(ctx); sid != "" {
		sum := sha256.Sum256([]byte(sid))
		rec.Session = hex.EncodeToString(sum[:8])
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
