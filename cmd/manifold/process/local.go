package process

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/loopback"
	"github.com/manifold-mcp/manifold/router/frontend"
)

// A Manifold whose caller is one user (manifold stdio, or a loopback
// listener without downstream authentication) gives that caller one
// principal, the local principal, where an upstream of oauth mode user
// needs one to keep its token under: a desktop user consents once, as
// themselves, with no token of Manifold's own to invent.

// localPrincipal is the local principal, named by local_principal or the
// OS user, when an upstream of oauth mode user needs one; nil otherwise
// (nothing else changes for a caller without a principal).
func localPrincipal(cfg *config.Config) *auth.Principal {
	if !slices.ContainsFunc(cfg.Upstreams, func(u config.Upstream) bool { return u.OAuth != nil && u.OAuth.Mode == config.OAuthUser }) {
		return nil
	}
	name := cfg.LocalPrincipal
	if name == "" {
		name = osUser()
	}
	return &auth.Principal{ID: "local:" + name, Claims: map[string][]string{"preferred_username": {name}}, Keyed: true}
}

// osUser names the user this process runs as.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return fmt.Sprintf("uid-%d", os.Getuid())
}

// localCaller makes every caller of a loopback listener without
// downstream authentication the local principal (validate refuses mode
// user without auth on any other listener).
func (p *Process) localCaller() frontend.Link {
	if p.local == nil || p.auth.Enabled() || !p.cfg.LoopbackListen() {
		return func(next http.Handler) http.Handler { return next }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p.local)))
		})
	}
}

// oauthPages serves the OAuth callback and the consent page on mux, open
// to all (the user's browser carries no caller credential), for the hosts
// allowed and base's.
func (p *Process) oauthPages(mux *http.ServeMux) {
	hosts := frontend.CheckHost(append(slices.Clip(p.cfg.AllowedHosts), publicHost(p.base)))
	mux.Handle(config.CallbackPath, frontend.Chain(p.oauth.limited(p.oauth.callback, p.oauth.callbacks), frontend.Recover(p.log), hosts))
	mux.Handle(config.ConnectPath, frontend.Chain(p.oauth.limited(p.oauth.connect, p.oauth.connects), frontend.Recover(p.log), hosts))
}

// NewStdio is New for manifold stdio. Where an upstream of oauth mode
// user asks its user to consent, the authorization server sends the
// browser back to this process: it listens on a loopback port for that
// (RFC 8252's loopback redirect), public_url's when it is a loopback URL
// (a redirect URI registered beforehand names its port), else one the
// system picks.
func NewStdio(cfg *config.Config, log *slog.Logger) (*Process, error) {
	if localPrincipal(cfg) == nil {
		return build(cfg, log, "", nil)
	}
	l, err := net.Listen("tcp", pagesAddress(cfg.PublicURL))
	if err != nil {
		return nil, fmt.Errorf("the OAuth callback's loopback listener: %w", err)
	}
	p, err := build(cfg, log, "http://"+l.Addr().String(), l)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return p, nil
}

// pagesAddress is where manifold stdio listens for its OAuth pages:
// public_url's host and port when it is a loopback http URL, else a port
// of 127.0.0.1 the system picks.
func pagesAddress(public string) string {
	u, err := url.Parse(public)
	if err != nil || u.Scheme != "http" || !loopback.Host(u.Hostname()) || strings.Trim(u.Path, "/") != "" {
		return "127.0.0.1:0"
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return u.Host
}

// servePages serves the OAuth pages on manifold stdio's listener, until
// drain.
func (p *Process) servePages() {
	if p.pages == nil {
		return
	}
	mux := http.NewServeMux()
	p.oauthPages(mux)
	p.pagesSrv = Bounded(mux, p.cfg.ReadTimeout)
	p.pagesSrv.ErrorLog = slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)
	srv, l := p.pagesSrv, p.pages
	go func() { _ = srv.Serve(l) }()
	p.log.Info("OAuth consent pages listening", "url", p.base+config.ConnectPath)
}

// closePages stops what servePages started, and the listener.
func (p *Process) closePages() {
	if p.pagesSrv != nil {
		_ = p.pagesSrv.Close()
	}
	if p.pages != nil {
		_ = p.pages.Close()
	}
}
