// Package server assembles one Manifold process from its configuration:
// the upstream clients, the router, the downstream endpoint and the HTTP
// server, and owns their lifecycle (start, drain, stop).
package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/config"
	"github.com/manifold-mcp/manifold/endpoint"
	"github.com/manifold-mcp/manifold/hub"
	"github.com/manifold-mcp/manifold/mcp"
	"github.com/manifold-mcp/manifold/merge"
	"github.com/manifold-mcp/manifold/metrics"
	"github.com/manifold-mcp/manifold/namespace"
	"github.com/manifold-mcp/manifold/router"
	"github.com/manifold-mcp/manifold/upstream"
)

// Server is a configured, not yet listening, Manifold.
type Server struct {
	cfg       *config.Config
	log       *slog.Logger
	upstreams []*upstream.Upstream
	cache     *cache.Cache
	hub       *hub.Hub
	http      *http.Server
}

// New builds every component. Stdio upstream processes start here.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) {
	s := &Server{cfg: cfg, log: log}
	// Upstream events go to the hub, which is built once the upstreams are.
	// A stdio child may speak first: until then there is nothing cached and
	// nobody subscribed, so its events are of no use to anyone.
	var hubReady atomic.Pointer[hub.Hub]
	onEvent := func(name string, ev upstream.Event) {
		if h := hubReady.Load(); h != nil {
			h.OnEvent(name, ev)
		}
	}
	for _, uc := range cfg.Upstreams {
		u, err := upstream.New(uc, upstream.Options{Logger: log, OnEvent: onEvent})
		if err != nil {
			s.closeUpstreams(context.Background())
			return nil, err
		}
		s.upstreams = append(s.upstreams, u)
	}
	names := make([]string, len(s.upstreams))
	for i, u := range s.upstreams {
		names[i] = u.Name()
	}
	c, err := cache.New(cfg.Cache, names, log)
	if err != nil {
		s.closeUpstreams(context.Background())
		return nil, err
	}
	s.cache = c
	s.hub = hub.New(hub.Options{
		Upstreams:  s.upstreams,
		Namespace:  namespace.Namespace{Prefix: cfg.Namespace == config.NamespacePrefix},
		Cache:      c,
		Logger:     log,
		KeepAlive:  cfg.Subscriptions.KeepAlive,
		MaxStreams: cfg.Subscriptions.MaxStreams,
		Queue:      cfg.Subscriptions.Queue,
	})
	hubReady.Store(s.hub)
	rt := router.New(router.Options{
		Upstreams: s.upstreams,
		Namespace: namespace.Namespace{Prefix: cfg.Namespace == config.NamespacePrefix},
		Codec:     merge.NewCodec(cursorSecret(cfg, log), cfg.CursorTTL),
		Logger:    log,
		Capabilities: func() mcp.Capabilities {
			rc := s.hub.Capabilities()
			return mcp.Capabilities{Resources: &rc}
		},
		Cache: c,
	})
	ep := endpoint.New(endpoint.Options{
		Handler:        rt,
		Streams:        s.hub,
		AllowedHosts:   cfg.AllowedHosts,
		AllowedOrigins: cfg.AllowedOrigins,
		MaxBodyBytes:   int64(cfg.MaxRequestBytes),
		BearerTokens:   cfg.Auth.BearerTokens,
		Logger:         log,
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep)
	mux.Handle("GET /metrics", metrics.Handler(c))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// cursorSecret is the key that signs pagination cursors: cursor_secret, or
// one derived from the cache secret (which replicas sharing Redis already
// share), or a random one valid on this process only.
func cursorSecret(cfg *config.Config, log *slog.Logger) []byte {
	if cfg.CursorSecret != "" {
		return []byte(cfg.CursorSecret)
	}
	if cfg.Cache.Secret != "" {
		m := hmac.New(sha256.New, []byte(cfg.Cache.Secret))
		m.Write([]byte("manifold cursor secret"))
		return m.Sum(nil)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	log.Info("neither cursor_secret nor cache.secret is set: pagination cursors are valid on this process only")
	return secret
}

// Handler is the HTTP handler Serve serves: /mcp, /metrics and /healthz.
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Serve accepts connections on l until ctx is done, then drains: in-flight
// requests get ShutdownTimeout to finish, and upstreams are closed (legacy
// sessions deleted, processes stopped).
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	for _, u := range s.upstreams {
		u.StartWatching()
		go func() {
			// Negotiate early, so the first request does not pay for it
			// and a misconfigured upstream shows in the log at once.
			if _, err := u.Info(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("upstream not ready", "upstream", u.Name(), "err", err)
			}
		}()
	}
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(l) }()
	s.log.Info("manifold listening", "addr", l.Addr().String(), "endpoint", "/mcp", "upstreams", len(s.upstreams))
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	s.log.Info("manifold shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	// Subscription streams never go idle by themselves: end them, each with
	// its graceful-closure result, before waiting for the rest to drain.
	if err := s.hub.Close(sctx); err != nil {
		s.log.Warn("closing subscription streams", "err", err)
	}
	if err := s.http.Shutdown(sctx); err != nil {
		s.log.Warn("drain incomplete", "err", err)
		_ = s.http.Close()
	}
	// Upstreams get their own budget: a drain that used all of its time
	// must not turn a clean process stop into a SIGKILL.
	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ucancel()
	s.closeUpstreams(uctx)
	s.log.Info("cache summary: " + s.cache.Summary())
	if err := s.cache.Close(); err != nil {
		s.log.Warn("closing cache", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	return nil
}

func (s *Server) closeUpstreams(ctx context.Context) {
	done := make(chan struct{}, len(s.upstreams))
	for _, u := range s.upstreams {
		go func() {
			if err := u.Close(ctx); err != nil {
				s.log.Warn("closing upstream", "upstream", u.Name(), "err", err)
			}
			done <- struct{}{}
		}()
	}
	for range s.upstreams {
		<-done
	}
}
