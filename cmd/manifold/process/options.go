package process

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/router/session"
	"github.com/manifold-mcp/manifold/upstream"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// The translation of the configuration file into each part's own options.

func namespaceOf(cfg *config.Config) namespace.Namespace {
	return namespace.Namespace{Prefix: cfg.Namespace == config.NamespacePrefix}
}

// newUpstreams builds a client per configured upstream, in order; on a
// failure it stops those already started.
func (p *Process) newUpstreams(ucs []config.Upstream) ([]*upstream.Upstream, error) {
	var ups []*upstream.Upstream
	for _, uc := range ucs {
		u, err := p.newUpstream(uc)
		if err != nil {
			closeAll(context.Background(), ups, p.log)
			return nil, err
		}
		ups = append(ups, u)
	}
	return ups, nil
}

// newUpstream builds one client, its events going to the hub and its
// exchanges to the metrics.
func (p *Process) newUpstream(uc config.Upstream) (*upstream.Upstream, error) {
	o, err := upstreamOptions(uc, p.cfg.Cache.CredentialHeaders)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", uc.Name, err)
	}
	if err := p.oauth.wire(uc, &o); err != nil {
		return nil, fmt.Errorf("upstream %s: %w", uc.Name, err)
	}
	o.Logger, o.OnEvent, o.Observe = p.log, p.onEvent, p.metrics.upstream(uc.Name)
	o.OnState = func(string, upstream.State) { p.noteReadiness() }
	o.ProbeInterval = p.cfg.Health.ProbeInterval
	u, err := upstream.New(o)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", uc.Name, err)
	}
	return u, nil
}

func upstreamOptions(uc config.Upstream, credentials []string) (upstream.Options, error) {
	o := upstream.Options{
		Name:           uc.Name,
		Required:       uc.Required,
		ForwardHeaders: uc.ForwardHeaders,
		KeyByPrincipal: uc.CacheKey == config.CacheKeyPrincipal || !forwardsAny(uc.ForwardHeaders, credentials),
		Description:    uc.Description,
		Protocol:       uc.Protocol,
		CallTimeout:    uc.CallTimeout,
		Filters: map[string]upstream.Filter{
			mcp.MethodToolsList:   {Allow: uc.Tools.Allow, Deny: uc.Tools.Deny},
			mcp.MethodPromptsList: {Allow: uc.Prompts.Allow, Deny: uc.Prompts.Deny},
		},
		DefaultTTL:   uc.DefaultTTL,
		DefaultScope: uc.DefaultScope,
		ToolCache: upstream.ToolCache{TTL: uc.ToolCache.TTL, Scope: uc.ToolCache.Scope,
			Tools: upstream.Filter{Allow: uc.ToolCache.Tools}, StaleIfError: uc.ToolCache.StaleIfError},
		Options: transport.Options{
			URL: uc.URL, Wire: uc.Transport, Header: http.Header{},
			Command: uc.Command, Dir: uc.Dir, PerPrincipal: uc.PerPrincipal,
			Timeout: uc.Timeout, MaxResponseBytes: int64(uc.MaxResponseBytes),
			Retries: config.UpstreamRetries, MaxIdleConns: config.UpstreamIdleConns,
		},
	}
	for _, r := range uc.Access {
		o.Access = append(o.Access, upstream.AccessRule{Claim: r.Claim, Values: r.Values})
	}
	for k, v := range uc.Headers {
		o.Header.Set(k, v)
	}
	for k, v := range uc.Env {
		o.Env = append(o.Env, k+"="+v)
	}
	if uc.TLS != (config.TLS{}) {
		tc, err := tlsClientConfig(uc.TLS)
		if err != nil {
			return o, err
		}
		o.TLS = tc
	}
	return o, nil
}

// forwardsAny reports whether forwarded names one of the credential
// headers (header names are case-insensitive).
func forwardsAny(forwarded, credentials []string) bool {
	for _, f := range forwarded {
		for _, c := range credentials {
			if strings.EqualFold(f, c) {
				return true
			}
		}
	}
	return false
}

func tlsClientConfig(t config.TLS) (*tls.Config, error) {
	tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: no certificate found in %s", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func cacheOptions(cfg *config.Config, log *slog.Logger) (cache.Options, error) {
	c := cfg.Cache
	o := cache.Options{
		MemoryBytes:       int64(*c.Memory.MaxBytes),
		Secret:            []byte(c.Secret),
		CredentialHeaders: c.CredentialHeaders,
		MaxEntryBytes:     int(c.MaxEntryBytes),
		MaxTTL:            c.MaxTTL,
		StaleIfError:      *c.StaleIfError,
		Refresh:           c.RefreshAhead,
		Logger:            log,
	}
	r := c.Redis
	if !r.Enabled() {
		return o, nil
	}
	ro := &cache.RedisOptions{
		Client: redis.UniversalOptions{
			Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username, Password: r.Password, DB: r.DB,
		},
		Prefix: r.Prefix, Timeout: r.Timeout, BreakerFailures: config.RedisBreakerFailures, BreakerCooldown: config.RedisBreakerCooldown,
		EncryptPrivate: true,
	}
	if r.URL != "" {
		u, err := redis.ParseURL(r.URL)
		if err != nil {
			return o, fmt.Errorf("cache.redis.url: %w", err)
		}
		ro.Client.Addrs = []string{u.Addr}
		if u.Network == "unix" {
			// UniversalOptions has no Network: dial the socket ourselves.
			ro.Client.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", addr)
			}
		}
		ro.Client.Username, ro.Client.Password, ro.Client.DB, ro.Client.TLSConfig = u.Username, u.Password, u.DB, u.TLSConfig
	}
	o.Redis = ro
	return o, nil
}

// newSessionStore keeps legacy sessions in Redis when the cache has it, so
// that any replica serves any session; in process otherwise.
func newSessionStore(cfg *config.Config, log *slog.Logger) session.Store {
	limits := session.Limits{Max: cfg.Sessions.Max, PerShare: cfg.Sessions.MaxPerPrincipal}
	co, err := cacheOptions(cfg, log)
	if err != nil || co.Redis == nil {
		return session.NewMemoryLimited(cfg.Sessions.IdleTimeout, limits)
	}
	return session.NewRedis(session.RedisOptions{
		Client: co.Redis.Client, Prefix: co.Redis.Prefix, Idle: cfg.Sessions.IdleTimeout, Limits: limits,
		Timeout: max(co.Redis.Timeout, 500*time.Millisecond), Logger: log,
	})
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

// newAuthenticator builds the caller authentication of auth. The key set is
// fetched with a few bounded retries: an identity provider's blip must not
// refuse every caller with a new key.
func newAuthenticator(cfg *config.Config, log *slog.Logger) (*auth.Authenticator, error) {
	o := auth.Options{BearerTokens: cfg.Auth.BearerTokens, Logger: log,
		FromClientCert: cfg.Auth.PrincipalFrom == config.PrincipalFromClientCert}
	if j := cfg.Auth.JWT; j.Issuer != "" {
		rc := retryablehttp.NewClient()
		rc.RetryMax, rc.RetryWaitMin, rc.RetryWaitMax = 2, 100*time.Millisecond, time.Second
		rc.HTTPClient.Timeout = 5 * time.Second
		rc.Logger = nil
		o.JWT = &auth.JWTOptions{Issuer: j.Issuer, Audiences: j.Audiences, JWKSURL: j.JWKSURL,
			JWKSFile: j.JWKSFile, PrincipalClaims: cfg.Auth.PrincipalClaims, Leeway: j.Leeway,
			Client: rc.StandardClient()}
	}
	a, err := auth.New(o)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return a, nil
}
