// Package process assembles one Manifold process from its configuration and
// owns its lifecycle.
//
// New provisions every part in dependency order: the upstream clients (stdio
// children start here) and their registry, the cache, the hub, the router,
// the dispatcher and the HTTP frontend wrapped in its chain of links. Serve
// accepts connections, and on cancellation drains in reverse order:
// subscription streams end with their graceful-closure result, in-flight
// requests finish, upstreams are closed (legacy sessions deleted, processes
// stopped) and the cache is released. This is the only package, with
// internal/config, that knows the shape of the configuration file: every
// other part gets options of its own (options.go).
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/internal/servertls"
	"github.com/manifold-mcp/manifold/merge"
	"github.com/manifold-mcp/manifold/router"
	"github.com/manifold-mcp/manifold/router/frontend"
	"github.com/manifold-mcp/manifold/router/hub"
	"github.com/manifold-mcp/manifold/router/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// Process is a configured, not yet listening, Manifold.
type Process struct {
	cfg       *config.Config
	log       *slog.Logger
	metrics   *metrics
	traffic   *traffic // what the admin page keeps of the requests served
	upstreams *upstream.Registry
	views     []*upstream.View // the curated endpoints', in configuration order
	cache     *cache.Cache
	hub       *hub.Hub
	hubReady  atomic.Pointer[hub.Hub]
	sessions  session.Store
	dispatch  *frontend.Dispatcher
	auth      *auth.Authenticator
	certs     *servertls.Files // nil without tls.cert_file
	limits    *limits
	audit     *audit.Log    // nil without audit.file
	resource  auth.Resource // the protected resource metadata
	oauth     *oauthClients // the upstreams' OAuth clients
	http      *http.Server
	admin     *http.Server // nil without admin.listen
	reloadMu  sync.Mutex   // one reload at a time; guards cfg's upstreams and started
	started   context.Context
	readyMu   sync.Mutex
	readyLast string // the readiness last logged

	base     string          // where a user's browser reaches this process ("": nowhere)
	pages    net.Listener    // manifold stdio's loopback listener of the OAuth pages
	pagesSrv *http.Server    // serving pages, once ServeStdioAt started
	local    *auth.Principal // the one caller of stdio or of a loopback listener without auth
}

// New builds every component. Stdio upstream processes start here.
func New(cfg *config.Config, log *slog.Logger) (*Process, error) {
	return build(cfg, log, cfg.BaseURL(), nil)
}

// build is New with base, where a user's browser reaches this process
// (its OAuth callback and consent page), and pages, the loopback listener
// of manifold stdio's pages (nil for serve, which serves them on listen).
func build(cfg *config.Config, log *slog.Logger, base string, pages net.Listener) (*Process, error) {
	p := &Process{cfg: cfg, log: log, started: context.Background(), base: base, pages: pages, local: localPrincipal(cfg)}
	for _, w := range cfg.Warnings() {
		log.Warn("configuration: " + w.String())
	}
	p.metrics = newMetrics(p)
	p.traffic = newTraffic(p.cacheHits)
	if err := p.provisionGuards(); err != nil {
		return nil, err
	}
	ups, err := p.newUpstreams(cfg.Upstreams)
	if err != nil {
		p.closeGuards()
		return nil, err
	}
	p.upstreams = upstream.NewRegistry(ups)
	p.oauth.clientOf = func(name string) *oauth.Client {
		if u := p.upstreams.Load().Get(name); u != nil {
			return u.OAuth()
		}
		return nil
	}
	co, err := cacheOptions(cfg, log)
	if err == nil {
		p.views, err = newViews(cfg.Endpoints)
	}
	if err == nil {
		p.cache, err = cache.New(co)
	}
	if err != nil {
		p.closeUpstreams(context.Background()) // as Stop does: upstreams, then what guards them
		p.closeGuards()
		return nil, err
	}
	p.upstreams.OnSwap(p.revalidateReplaced)
	p.dispatch = p.newDispatcher(namespaceOf(cfg))
	p.sessions = newSessionStore(cfg, log)
	p.http = p.server(p.mux(frontend.NewLegacy(p.dispatch, p.sessions)))
	if cfg.Admin.Listen != "" {
		p.admin = p.server(p.adminMux())
	}
	return p, nil
}

// newDispatcher builds the hub, the router and its chain of links, and the
// dispatcher every frontend serves through.
func (p *Process) newDispatcher(ns namespace.Namespace) *frontend.Dispatcher {
	cfg, log := p.cfg, p.log
	secret := cursorSecret(cfg, log)
	p.hub = hub.New(hub.Options{
		Upstreams:   p.upstreams,
		Namespace:   ns,
		Invalidator: p.cache,
		Logger:      log,
		Queue:       config.SubscriberQueue,
		MaxURIs:     cfg.Subscriptions.MaxURIsPerStream,
		MaxWatched:  cfg.Subscriptions.MaxWatched(),
		MaxBytes:    int64(cfg.Subscriptions.MaxBytes),
	})
	p.hubReady.Store(p.hub)
	if p.oauth != nil {
		p.oauth.connected = tellHub(p.hub)
		p.oauth.listenReplicas()
	}
	rt := router.New(router.Options{
		Upstreams: p.upstreams,
		Namespace: ns,
		Codec:     merge.NewCodec(secret, cfg.CursorTTL),
		Secret:    secret,
		Logger:    log,
		Cache:     p.cache,
		Admit:     p.limits.admitHook(),

		CredentialHeaders: cfg.Cache.CredentialHeaders,
	})
	links := append([]router.Link{router.Traced(), router.Observed(p.metrics.request), router.Observed(p.traffic.count)}, p.auditLink()...)
	return frontend.NewDispatcher(frontend.Options{
		Handler:      rt,
		Links:        links,
		Hub:          p.hub,
		Capabilities: rt.Capabilities,
		KeepAlive:    cfg.Subscriptions.KeepAlive,
		Plans:        p.cache.Keeps(),
		Logger:       log,
	})
}

// onEvent passes an upstream's event to the hub. A stdio child may speak
// before the hub exists: then nothing is cached and nobody subscribed, so
// the event is of no use to anyone.
func (p *Process) onEvent(name string, ev upstream.Event) {
	if h := p.hubReady.Load(); h != nil {
		h.OnEvent(name, ev)
	}
}

// server is Bounded with the listeners' TLS and a log of their errors.
func (p *Process) server(h http.Handler) *http.Server {
	srv := Bounded(h, p.cfg.ReadTimeout)
	if p.certs != nil {
		srv.TLSConfig = p.certs.Config()
	}
	srv.ErrorLog = slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)
	return srv
}

// Bounded is the http.Server a listener of Manifold's serves h on, which
// bounds what a caller may hold: headers and body within readTimeout
// (read_timeout; the deadline is cleared once the body is read, so streams
// go on), idle connections, header size.
func Bounded(h http.Handler, readTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, readTimeout),
		ReadTimeout:       readTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// links is the chain of links of the main listener's MCP paths, in the
// order a request meets them: those of the main endpoint (v nil), or of
// the curated endpoint of view v.
func (p *Process) links(v *upstream.View) []frontend.Link {
	links := []frontend.Link{
		frontend.Recover(p.log),
		p.auditRefused(v),
		frontend.CheckHost(p.cfg.AllowedHosts),
		frontend.CheckOrigin(p.cfg.AllowedOrigins),
		frontend.SingleValued(append([]string{"Authorization"}, p.cfg.Cache.CredentialHeaders...)),
		frontend.Authenticate(p.auth, p.resource, p.log),
		p.localCaller(),
		frontend.RateLimit(p.limits.principal, p.limits.principalRefused),
		frontend.LimitBody(int64(p.cfg.MaxRequestBytes)),
	}
	if v != nil {
		// After the rate limit, as the 404 of the paths beside an endpoint
		// is (mountEndpoints): a caller it does not admit spends its limit
		// here as there, and is refused 429 alike once it is spent.
		links = append(links, frontend.AtEndpoint(v))
	}
	return links
}

// mux routes the main listener's paths: /mcp, and the 2024-11-05 HTTP+SSE
// transport's /sse and /messages, each through the same chain of links;
// the curated endpoints' (endpoints.go); the page at / (root.go); and,
// without an admin listener,
// the operational endpoints beside them.
func (p *Process) mux(legacy *frontend.Legacy) *http.ServeMux {
	links := p.links(nil)
	sse := frontend.NewSSE(legacy)
	mux := http.NewServeMux()
	mux.Handle("/mcp", frontend.Chain(frontend.NewHTTP(p.dispatch, legacy), links...))
	mux.Handle(frontend.SSEStreamPath, frontend.Chain(sse.Stream(), links...))
	mux.Handle(frontend.SSEMessagesPath, frontend.Chain(sse.Messages(), links...))
	p.mountEndpoints(mux, legacy, sse)
	p.rootPage(mux)
	if p.auth.Enabled() && p.resource.Published() {
		// Open to all: it is how a client learns where to get a token.
		metadata := frontend.Chain(p.resource, frontend.CheckHost(p.cfg.AllowedHosts))
		mux.Handle(auth.MetadataPath, metadata)
		mux.Handle(auth.MetadataPath+"/mcp", metadata)
	}
	if p.base != "" && p.pages == nil {
		p.oauthPages(mux)
	}
	if p.cfg.Admin.Listen == "" {
		p.ops(mux, false)
	}
	return mux
}

// publicHost is the host of the public URL.
func publicHost(public string) string {
	u, err := url.Parse(public)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// Handler is the main listener's HTTP handler: /mcp, and the operational
// endpoints when there is no admin listener.
func (p *Process) Handler() http.Handler { return p.http.Handler }

// serveOn serves s on l, over TLS when the configuration has a certificate
// (the server's TLSConfig, set by server).
func (p *Process) serveOn(s *http.Server, l net.Listener) error {
	if s.TLSConfig != nil {
		return s.ServeTLS(l, "", "")
	}
	return s.Serve(l)
}

// Serve accepts connections on l (and on admin.listen, if set) until ctx
// is done, then drains: in-flight requests get ShutdownTimeout to finish,
// and upstreams are closed (legacy sessions deleted, processes stopped).
func (p *Process) Serve(ctx context.Context, l net.Listener) error {
	errc := make(chan error, 2)
	if p.admin != nil {
		al, err := net.Listen("tcp", p.cfg.Admin.Listen)
		if err != nil {
			p.drain()
			return fmt.Errorf("admin listener: %w", err)
		}
		go func() { errc <- p.serveOn(p.admin, al) }()
		p.log.Info("admin listening", "addr", al.Addr().String())
	}
	n := p.start(ctx)
	go func() { errc <- p.serveOn(p.http, l) }()
	p.log.Info("manifold listening", "addr", l.Addr().String(), "endpoint", "/mcp", "upstreams", n)
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	p.drain()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	return nil
}

// ServeStdio serves one caller on in and out (manifold stdio) until in
// ends or ctx does, then stops like Serve. The caller is one principal,
// under limits.per_principal as an HTTP caller is.
func (p *Process) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	return p.ServeStdioAt(ctx, "", in, out)
}

// ServeStdioAt is ServeStdio serving the view of the endpoint at path (""
// or /mcp: everything). The caller is the local principal where an
// upstream of oauth mode user needs one, and has no claims: an endpoint
// with access rules admits no stdio caller.
func (p *Process) ServeStdioAt(ctx context.Context, at string, in io.Reader, out io.Writer) error {
	v, err := p.viewAt(at)
	if err == nil && !v.Admits(nil) {
		err = fmt.Errorf("endpoint %s admits only the principals its access rules name, and a stdio caller has none", at)
	}
	if err != nil {
		p.drain()
		return err
	}
	ctx = upstream.WithView(ctx, v)
	if p.local != nil {
		ctx = auth.WithPrincipal(ctx, p.local)
	}
	p.servePages()
	p.log.Info("manifold serving on stdin/stdout", "endpoint", v.Name(), "upstreams", p.start(ctx))
	err = frontend.NewStdio(p.dispatch, int(p.cfg.MaxRequestBytes), p.cfg.ShutdownTimeout, p.log).
		Limit(p.limits.principal, stdioPrincipal(), p.limits.principalRefused).
		Serve(ctx, in, out)
	p.drain()
	return err
}

// start begins serving on ctx: the upstreams are watched and negotiated,
// and those a reload adds later start on ctx too. It returns how many
// upstreams there are.
func (p *Process) start(ctx context.Context) int {
	p.reloadMu.Lock()
	p.started = ctx
	p.reloadMu.Unlock()
	go p.traffic.run(ctx)
	all := p.upstreams.Load().All()
	p.startUpstreams(ctx, all)
	return len(all)
}

// startUpstreams keeps each of ups watched, and negotiates with each
// early, so the first request does not pay for it and a misconfigured
// upstream shows in the log at once (its health record logs the failure).
func (p *Process) startUpstreams(ctx context.Context, ups []*upstream.Upstream) {
	for _, u := range ups {
		u.StartWatching()
		if !u.PerPrincipal() { // one reached as each caller waits for one
			go func() { _, _ = u.Info(ctx) }()
		}
	}
}

// drain stops the process, the reverse of New.
func (p *Process) drain() {
	p.log.Info("manifold shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownTimeout)
	defer cancel()
	// Subscription streams never go idle by themselves: end them, each with
	// its graceful-closure result, before waiting for the rest to drain.
	if err := p.hub.Close(sctx); err != nil {
		p.log.Warn("closing subscription streams", "err", err)
	}
	if err := p.http.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		p.log.Warn("drain incomplete", "err", err)
		_ = p.http.Close()
	}
	if p.admin != nil {
		_ = p.admin.Close()
	}
	p.closePages()
	// Upstreams get their own budget: a drain that used all of its time
	// must not turn a clean process stop into a SIGKILL.
	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ucancel()
	p.closeUpstreams(uctx)
	if err := p.sessions.Close(); err != nil {
		p.log.Warn("closing the session store", "err", err)
	}
	p.log.Info("cache summary: " + p.cache.Summary())
	if err := p.cache.Close(); err != nil {
		p.log.Warn("closing cache", "err", err)
	}
	p.closeGuards()
}

// provisionGuards builds what stands before the router: authentication
// and the protected resource metadata, the audit log, the rate limits.
func (p *Process) provisionGuards() error {
	var err error
	if t := p.cfg.TLS; t.CertFile != "" {
		p.certs, err = servertls.Load(servertls.Options{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}, p.log)
		if err != nil {
			return err
		}
	}
	if p.auth, err = newAuthenticator(p.cfg, p.log); err != nil {
		return err
	}
	a := p.cfg.Auth
	p.resource = auth.Resource{Resource: a.Resource, AuthorizationServers: a.MetadataServers(), ScopesSupported: a.ScopesSupported, Endpoint: "/mcp"}
	if p.audit, err = openAudit(p.cfg, p.metrics.reg); err != nil {
		return err
	}
	p.limits = newLimits(p.cfg, p.log, p.metrics.reg)
	p.oauth, err = newOAuthClients(p.cfg, p.base, p.log)
	return err
}

// closeGuards closes the audit log (writing what is queued), the rate
// limits' Redis client and the OAuth clients' store.
func (p *Process) closeGuards() {
	p.closeAudit()
	if err := p.limits.close(); err != nil {
		p.log.Warn("closing the rate limits' Redis client", "err", err)
	}
	if p.oauth != nil {
		if err := p.oauth.close(); err != nil {
			p.log.Warn("closing the OAuth clients' Redis client", "err", err)
		}
	}
}

func (p *Process) closeUpstreams(ctx context.Context) {
	closeAll(ctx, p.upstreams.Load().All(), p.log)
}

// closeAll closes ups in parallel, each then its OAuth client, and waits
// for them.
func closeAll(ctx context.Context, ups []*upstream.Upstream, log *slog.Logger) {
	done := make(chan struct{}, len(ups))
	for _, u := range ups {
		go func() {
			if err := u.Close(ctx); err != nil {
				log.Warn("closing upstream", "upstream", u.Name(), "err", err)
			}
			if c := u.OAuth(); c != nil {
				closeClient(c)
			}
			done <- struct{}{}
		}()
	}
	for range ups {
		<-done
	}
}
