package config

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/loopback"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// ByteSize is a size in bytes, written as a number or with a unit:
// 1048576, 512KiB, 16MiB, 1GiB (also KB, MB, GB as powers of 1000).
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB or GiB)", n.Value)
	}
	*b = ByteSize(v * mult)
	return nil
}

// Defaults for keys the file leaves out.
const (
	DefaultListen           = "127.0.0.1:8080"
	DefaultMaxRequestBytes  = 1 << 20
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultCursorTTL        = time.Hour
	DefaultTimeout          = 30 * time.Second
	DefaultCallTimeout      = 5 * time.Minute
	DefaultRetries          = 2
	DefaultMaxIdleConns     = 64
	TransportAuto           = "auto"
	TransportHTTP           = "http"
	TransportSSE            = "sse"
	TransportStdio          = "stdio"
	CacheKeyCredential      = "credential"
	CacheKeyPrincipal       = "principal"
	DefaultMaxResponseBytes = 16 << 20
	DefaultMemoryBytes      = 64 << 20
	DefaultMaxEntryBytes    = 1 << 20
	DefaultMaxTTL           = time.Hour
	DefaultStaleIfError     = 5 * time.Minute
	DefaultRedisTimeout     = 100 * time.Millisecond
	DefaultRedisPrefix      = "manifold:"
	DefaultBreakerFailures  = 5
	DefaultBreakerCooldown  = 5 * time.Second
	DefaultProbeInterval    = 3 * time.Second
)

func (c *Config) applyDefaults() {
	setDefault(&c.Listen, DefaultListen)
	setDefault(&c.Namespace, NamespacePrefix)
	setDefault(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.ReadTimeout, 30*time.Second)
	setDefault(&c.CursorTTL, DefaultCursorTTL)
	setDefault(&c.Log.Level, "info")
	setDefault(&c.Log.Format, "text")
	setDefault(&c.Subscriptions.KeepAlive, 25*time.Second)
	setDefault(&c.Subscriptions.MaxStreams, 10_000)
	setDefault(&c.Subscriptions.Queue, 64)
	setDefault(&c.Subscriptions.MaxURIsPerStream, 1000)
	setDefault(&c.Subscriptions.MaxURIsPerUpstream, 10_000)
	setDefault(&c.Subscriptions.MaxBytes, 256<<20)
	setDefault(&c.Sessions.IdleTimeout, 30*time.Minute)
	setDefault(&c.Sessions.Max, 10_000)
	// A host opens one session per connection: a hundred is more than one
	// user's hosts need, and a tenth of the whole leaves room for at least
	// ten callers whatever max is.
	setDefault(&c.Sessions.MaxPerPrincipal, min(100, max(1, c.Sessions.Max/10)))
	setDefault(&c.Auth.JWT.Leeway, 30*time.Second)
	setDefault(&c.Audit.Format, "json")
	setDefault(&c.Health.ProbeInterval, DefaultProbeInterval)
	for _, l := range []*RateLimit{&c.Limits.PerPrincipal, &c.Limits.PerUpstream} {
		setDefault(&l.Burst, int(math.Ceil(l.Rate)))
	}
	c.Cache.applyDefaults()
	for i := range c.Upstreams {
		c.Upstreams[i].applyDefaults()
	}
}

func (cc *Cache) applyDefaults() {
	if cc.Memory.MaxBytes == nil {
		n := ByteSize(DefaultMemoryBytes)
		cc.Memory.MaxBytes = &n
	}
	if cc.StaleIfError == nil {
		d := DefaultStaleIfError
		cc.StaleIfError = &d
	}
	if len(cc.CredentialHeaders) == 0 {
		cc.CredentialHeaders = []string{"Authorization"}
	}
	setDefault(&cc.MaxEntryBytes, DefaultMaxEntryBytes)
	setDefault(&cc.MaxTTL, DefaultMaxTTL)
	setDefault(&cc.RefreshAhead, "public")
	setDefault(&cc.Redis.Prefix, DefaultRedisPrefix)
	setDefault(&cc.Redis.Timeout, DefaultRedisTimeout)
	setDefault(&cc.Redis.BreakerFailures, DefaultBreakerFailures)
	setDefault(&cc.Redis.BreakerCooldown, DefaultBreakerCooldown)
}

func (u *Upstream) applyDefaults() {
	if u.Retries == nil {
		n := DefaultRetries
		u.Retries = &n
	}
	setDefault(&u.Protocol, ProtocolAuto)
	setDefault(&u.Timeout, DefaultTimeout)
	setDefault(&u.CallTimeout, DefaultCallTimeout)
	setDefault(&u.MaxResponseBytes, DefaultMaxResponseBytes)
	setDefault(&u.MaxIdleConns, DefaultMaxIdleConns)
	setDefault(&u.CacheKey, CacheKeyCredential)
	setDefault(&u.Transport, TransportAuto)
	setDefault(&u.DefaultScope, "private")
	u.ToolCache.applyDefaults()
}

// setDefault sets *v to def when the file left it at its zero value.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

var upstreamName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// hopHeaders are connection-scoped or owned by Manifold's own protocol
// handling; forwarding them would break the upstream exchange.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Host": true,
	"Content-Length": true, "Content-Type": true, "Accept": true,
	"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Mcp-Method": true, "Mcp-Name": true,
}

// problems collects what is wrong with a file, each at its YAML path.
type problems []Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (c *Config) validate() []Problem {
	var ps problems
	c.validateListener(&ps)
	c.validateLimits(&ps)
	ps = append(ps, c.Cache.validate()...)
	c.Subscriptions.validate(&ps)
	c.Health.validate(&ps)
	if c.Sessions.IdleTimeout < time.Second {
		ps.add("sessions.idle_timeout", "must be at least 1s")
	}
	if c.Sessions.Max < 1 {
		ps.add("sessions.max", "must be at least 1")
	}
	if n := c.Sessions.MaxPerPrincipal; n < 1 || n > c.Sessions.Max {
		ps.add("sessions.max_per_principal", "must be at least 1 and at most sessions.max (%d)", c.Sessions.Max)
	}
	c.Auth.validate(&ps)
	c.validateTLS(&ps)
	if c.Audit.Format != "json" {
		ps.add("audit.format", "must be json")
	}
	c.Limits.PerPrincipal.validate(&ps, "limits.per_principal")
	c.Limits.PerUpstream.validate(&ps, "limits.per_upstream")
	c.validateUpstreams(&ps)
	c.validateEndpoints(&ps)
	c.validateOAuth(&ps)
	return ps
}

// validateListener checks what faces callers: the address, the namespace
// mode, and the Host and Origin values admitted.
func (c *Config) validateListener(ps *problems) {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		ps.add("listen", "must be host:port: %v", err)
	}
	if c.Admin.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Admin.Listen); err != nil {
			ps.add("admin.listen", "must be host:port: %v", err)
		} else if c.Admin.Listen == c.Listen {
			ps.add("admin.listen", "must differ from listen")
		}
	}
	c.validateAccess(ps, "admin.operators", c.Admin.Operators)
	if c.Admin.Pprof && c.Admin.Listen == "" {
		ps.add("admin.pprof", "needs admin.listen: profiles are never served on the main listener")
	}
	if c.Namespace != NamespacePrefix && c.Namespace != NamespaceNone {
		ps.add("namespace", "must be %q or %q, not %q", NamespacePrefix, NamespaceNone, c.Namespace)
	}
	for i, o := range c.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" {
			ps.add(fmt.Sprintf("allowed_origins[%d]", i), "must be an origin such as https://app.example.com, not %q", o)
		}
	}
	for i, h := range c.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			ps.add(fmt.Sprintf("allowed_hosts[%d]", i), "must be a host name or host:port, not %q", h)
		}
	}
}

// validateLimits checks the process-wide bounds, cursors and logging.
func (c *Config) validateLimits(ps *problems) {
	if c.MaxRequestBytes < 1024 {
		ps.add("max_request_bytes", "must be at least 1KiB")
	}
	if c.ShutdownTimeout < 0 {
		ps.add("shutdown_timeout", "must not be negative")
	}
	if c.ReadTimeout < 100*time.Millisecond {
		ps.add("read_timeout", "must be at least 100ms")
	}
	if c.CursorTTL < time.Second {
		ps.add("cursor_ttl", "must be at least 1s")
	}
	if c.CursorSecret != "" && len(c.CursorSecret) < 16 {
		ps.add("cursor_secret", "must be at least 16 characters")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		ps.add("log.level", "must be debug, info, warn or error, not %q", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		ps.add("log.format", "must be text or json, not %q", c.Log.Format)
	}
}

func (h *Health) validate(ps *problems) {
	if h.ProbeInterval < 100*time.Millisecond || h.ProbeInterval > 5*time.Minute {
		ps.add("health.probe_interval", "must be between 100ms and 5m")
	}
}

func (s *Subscriptions) validate(ps *problems) {
	if s.KeepAlive < 100*time.Millisecond {
		ps.add("subscriptions.keepalive", "must be at least 100ms")
	}
	if s.MaxStreams < 1 {
		ps.add("subscriptions.max_streams", "must be at least 1")
	}
	if s.Queue < 1 || s.Queue > 1<<16 {
		ps.add("subscriptions.queue", "must be between 1 and 65536")
	}
	if s.MaxURIsPerStream < 1 {
		ps.add("subscriptions.max_uris_per_stream", "must be at least 1")
	}
	if s.MaxURIsPerUpstream < s.MaxURIsPerStream {
		ps.add("subscriptions.max_uris_per_upstream", "must be at least max_uris_per_stream (%d)", s.MaxURIsPerStream)
	}
}

func (c *Config) validateUpstreams(ps *problems) {
	if len(c.Upstreams) == 0 {
		ps.add("upstreams", "at least one upstream is required")
	}
	seen := map[string]int{}
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		*ps = append(*ps, u.validate(fmt.Sprintf("upstreams[%d]", i), seen, i)...)
		u.ToolCache.validate(func(key, format string, args ...any) {
			ps.add(fmt.Sprintf("upstreams[%d].%s", i, key), format, args...)
		}, c.Cache.MaxTTL)
		if c.Namespace == NamespacePrefix && u.Name != "" && u.Name[0] >= '0' && u.Name[0] <= '9' {
			ps.add(fmt.Sprintf("upstreams[%d].name", i), "%q starts with a digit; with namespace: prefix it starts a URI scheme, which must begin with a letter", u.Name)
		}
		c.validateAccess(ps, fmt.Sprintf("upstreams[%d].access", i), u.Access)
	}
}

// validateAccess checks access rules (an upstream's, or the operators'):
// each names a claim and the values admitted, and claims come only with JWT
// or client certificates (a static token has none, so no rule matches it).
func (c *Config) validateAccess(ps *problems, path string, rules []AccessRule) {
	if len(rules) > 0 && c.Auth.JWT.Issuer == "" && c.Auth.PrincipalFrom != PrincipalFromClientCert {
		ps.add(path, "needs auth.jwt or auth.principal_from: client_cert: access rules match a principal's claims")
	}
	for j, r := range rules {
		if r.Claim == "" {
			ps.add(fmt.Sprintf("%s[%d].claim", path, j), "is required")
		}
		if len(r.Values) == 0 {
			ps.add(fmt.Sprintf("%s[%d].values", path, j), "must name at least one value")
		}
	}
}

func (u *Upstream) validate(path string, seen map[string]int, i int) []Problem {
	var ps problems
	bad := func(key, format string, args ...any) { ps.add(path+"."+key, format, args...) }
	u.validateName(bad, seen, i)
	u.validateTransport(bad)
	u.validateHeaders(bad)
	if u.Protocol != ProtocolAuto && u.Protocol != mcp.Version && !mcp.IsLegacy(u.Protocol) {
		bad("protocol", "must be auto, %s or one of %s, not %q", mcp.Version, strings.Join(mcp.Legacy, ", "), u.Protocol)
	}
	u.Tools.validate("tools", bad)
	u.Prompts.validate("prompts", bad)
	if u.DefaultScope != "private" && u.DefaultScope != "public" {
		bad("default_scope", "must be private or public, not %q", u.DefaultScope)
	}
	// A process of a principal's own answers for that principal alone.
	if u.PerPrincipal && u.DefaultScope == "public" {
		bad("default_scope", "must be private with per_principal: each principal's process answers for its principal alone")
	}
	if u.PerPrincipal && u.ToolCache.Scope == "public" {
		bad("tool_cache.scope", "must be private with per_principal: each principal's process answers for its principal alone")
	}
	u.validateBounds(bad)
	u.validateTLS(bad)
	return ps
}

// validateBounds checks the upstream's times and sizes.
func (u *Upstream) validateBounds(bad complain) {
	if u.Timeout < 0 {
		bad("timeout", "must not be negative")
	}
	if u.CallTimeout < 0 {
		bad("call_timeout", "must not be negative")
	}
	if u.DefaultTTL < 0 {
		bad("default_ttl", "must not be negative")
	}
	if *u.Retries < 0 || *u.Retries > 10 {
		bad("retries", "must be between 0 and 10")
	}
	if u.MaxIdleConns < 1 || u.MaxIdleConns > 4096 {
		bad("max_idle_conns", "must be between 1 and 4096")
	}
	if u.CacheKey != CacheKeyCredential && u.CacheKey != CacheKeyPrincipal {
		bad("cache_key", "must be credential or principal")
	}
	if u.MaxResponseBytes < 1024 {
		bad("max_response_bytes", "must be at least 1KiB")
	}
}

type complain func(key, format string, args ...any)

func (u *Upstream) validateName(bad complain, seen map[string]int, i int) {
	switch {
	case u.Name == "":
		bad("name", "is required")
	case !upstreamName.MatchString(u.Name) || len(u.Name) > 63:
		bad("name", "%q must match [a-z0-9][a-z0-9-]* (at most 63 characters): it becomes a URI scheme prefix", u.Name)
	default:
		if j, dup := seen[u.Name]; dup {
			bad("name", "%q is already the name of upstreams[%d]", u.Name, j)
		} else {
			seen[u.Name] = i
		}
	}
}

// validateTransport checks that the upstream is either HTTP (url) or stdio
// (command), with only the keys of its kind.
func (u *Upstream) validateTransport(bad complain) {
	switch {
	case u.URL == "" && len(u.Command) == 0:
		bad("url", "an upstream needs url (HTTP) or command (stdio)")
	case u.URL != "" && len(u.Command) > 0:
		bad("command", "url and command are exclusive")
	case u.URL != "":
		if p, err := url.Parse(u.URL); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("url", "must be an absolute http:// or https:// URL, not %q", u.URL)
		} else if p.User != nil {
			bad("url", "must not carry credentials; use headers")
		}
	default:
		if u.Command[0] == "" {
			bad("command[0]", "the program must not be empty")
		}
	}
	if len(u.Command) == 0 && (len(u.Env) > 0 || u.Dir != "" || u.InheritEnv) {
		bad("env", "env, inherit_env and dir apply to stdio upstreams (command) only")
	}
	if len(u.Command) == 0 && u.PerPrincipal {
		bad("per_principal", "applies to stdio upstreams (command) only")
	}
	if len(u.Command) > 0 && (len(u.Headers) > 0 || len(u.ForwardHeaders) > 0) {
		bad("headers", "headers and forward_headers apply to HTTP upstreams (url) only")
	}
	switch {
	case u.Transport != TransportAuto && u.Transport != TransportHTTP && u.Transport != TransportSSE && u.Transport != TransportStdio:
		bad("transport", "must be auto, http, sse or stdio, not %q", u.Transport)
	case u.Transport == TransportStdio && len(u.Command) == 0:
		bad("transport", "stdio needs command")
	case (u.Transport == TransportHTTP || u.Transport == TransportSSE) && u.URL == "":
		bad("transport", "%s needs url", u.Transport)
	}
}

func (u *Upstream) validateHeaders(bad complain) {
	for name := range u.Headers {
		if !validHeaderName(name) {
			bad("headers."+name, "not a valid HTTP header name")
		} else if hopHeaders[http.CanonicalHeaderKey(name)] {
			bad("headers."+name, "is managed by Manifold and cannot be set")
		}
	}
	for j, name := range u.ForwardHeaders {
		if !validHeaderName(name) {
			bad(fmt.Sprintf("forward_headers[%d]", j), "%q is not a valid HTTP header name", name)
		} else if hopHeaders[http.CanonicalHeaderKey(name)] {
			bad(fmt.Sprintf("forward_headers[%d]", j), "%q is managed by Manifold and cannot be forwarded", name)
		}
	}
}

func (u *Upstream) validateTLS(bad complain) {
	t := u.TLS
	if (t != TLS{}) && len(u.Command) > 0 {
		bad("tls", "applies to HTTP upstreams only")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		bad("tls", "cert_file and key_file go together")
	}
}

func (f Filter) validate(key string, bad complain) {
	for _, l := range []struct {
		list  string
		globs []string
	}{{"allow", f.Allow}, {"deny", f.Deny}} {
		list := l.list
		for j, g := range l.globs {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				bad(fmt.Sprintf("%s.%s[%d]", key, list, j), "%q is not a valid glob (path.Match syntax)", g)
			}
		}
	}
}

// MaxFunctionName is the longest function name the LLM APIs agents use
// accept; a namespaced tool name should fit.
const MaxFunctionName = 64

// Warnings lists what a valid file allows but is likely a mistake: with
// namespace: prefix, upstream names that leave little room for tool and
// prompt names within MaxFunctionName, and allowed names that would exceed
// it once prefixed.
func (c *Config) Warnings() []Problem {
	var ws problems
	c.toolCacheWarnings(&ws)
	if c.Namespace != NamespacePrefix {
		return ws
	}
	for i, u := range c.Upstreams {
		room := MaxFunctionName - len(u.Name) - 1
		if room < 24 {
			ws.add(fmt.Sprintf("upstreams[%d].name", i), "%q leaves %d characters for tool and prompt names, which become %s_NAME (LLM APIs accept at most %d)", u.Name, room, u.Name, MaxFunctionName)
		}
		for _, kf := range []struct {
			key string
			f   Filter
		}{{"tools", u.Tools}, {"prompts", u.Prompts}} {
			key := kf.key
			for j, name := range kf.f.Allow {
				if !strings.ContainsAny(name, "*?[\\") && len(name) > room {
					ws.add(fmt.Sprintf("upstreams[%d].%s.allow[%d]", i, key, j), "%s_%s is %d characters, over the %d LLM APIs accept", u.Name, name, len(u.Name)+1+len(name), MaxFunctionName)
				}
			}
		}
	}
	return ws
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (c *Cache) validate() []Problem {
	var ps []Problem
	bad := func(key, format string, args ...any) {
		ps = append(ps, Problem{Path: "cache." + key, Message: fmt.Sprintf(format, args...)})
	}
	if *c.Memory.MaxBytes < 0 {
		bad("memory.max_bytes", "must not be negative")
	}
	if c.MaxEntryBytes < 1 {
		bad("max_entry_bytes", "must be positive")
	}
	if c.MaxTTL < time.Second {
		bad("max_ttl", "must be at least 1s")
	}
	if *c.StaleIfError < 0 {
		bad("stale_if_error", "must not be negative")
	}
	if c.RefreshAhead != "public" && c.RefreshAhead != "all" && c.RefreshAhead != "off" {
		bad("refresh_ahead", "must be public, all or off, not %q", c.RefreshAhead)
	}
	for i, h := range c.CredentialHeaders {
		if !validHeaderName(h) {
			bad(fmt.Sprintf("credential_headers[%d]", i), "%q is not a valid HTTP header name", h)
		}
	}
	if c.Redis.Enabled() {
		if len(c.Secret) < 16 {
			bad("secret", "is required with redis (at least 16 characters), so every replica computes the same credential fingerprints")
		}
		c.Redis.validate(bad)
	}
	return ps
}

// validate checks the shared tier's settings.
func (r *Redis) validate(bad complain) {
	if r.URL != "" && len(r.Addrs) > 0 {
		bad("redis.addrs", "url and addrs are exclusive")
	}
	if r.URL != "" {
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			bad("redis.url", "must be a redis://, rediss:// or unix:// URL")
		}
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad(fmt.Sprintf("redis.addrs[%d]", i), "must be host:port")
		}
	}
	if r.Timeout <= 0 || r.Timeout > 10*time.Second {
		bad("redis.timeout", "must be between 1ns and 10s")
	}
	if r.BreakerFailures < 1 {
		bad("redis.breaker_failures", "must be at least 1")
	}
	if r.BreakerCooldown < 10*time.Millisecond {
		bad("redis.breaker_cooldown", "must be at least 10ms")
	}
}

// validate checks the static tokens, the JWT settings and the metadata.
func (a *Auth) validate(ps *problems) {
	for i, tok := range a.BearerTokens {
		path := fmt.Sprintf("auth.bearer_tokens[%d]", i)
		if strings.HasPrefix(tok, auth.HashPrefix) {
			if _, err := auth.TokenDigest(tok); err != nil {
				ps.add(path, "%v", err)
			}
		} else if len(tok) < 16 {
			ps.add(path, "must be at least 16 characters")
		}
	}
	switch a.PrincipalFrom {
	case "", PrincipalFromClientCert:
	default:
		ps.add("auth.principal_from", "must be client_cert or empty, not %q", a.PrincipalFrom)
	}
	j := a.JWT
	if j.Issuer == "" {
		if len(j.Audiences) > 0 || j.JWKSURL != "" || j.JWKSFile != "" || len(a.PrincipalClaims) > 0 {
			ps.add("auth.jwt.issuer", "is required when auth.jwt or auth.principal_claims is set")
		}
	} else {
		if len(j.Audiences) == 0 {
			ps.add("auth.jwt.audiences", "must name at least one audience")
		}
		if (j.JWKSURL == "") == (j.JWKSFile == "") {
			ps.add("auth.jwt", "needs exactly one of jwks_url and jwks_file")
		}
		if j.JWKSURL != "" {
			checkSecureURL(ps, "auth.jwt.jwks_url", j.JWKSURL)
		}
	}
	if j.Leeway < 0 || j.Leeway > 5*time.Minute {
		ps.add("auth.jwt.leeway", "must be between 0 and 5m")
	}
	if a.Resource != "" {
		checkSecureURL(ps, "auth.resource", a.Resource)
	}
	for i, s := range a.AuthorizationServers {
		checkSecureURL(ps, fmt.Sprintf("auth.authorization_servers[%d]", i), s)
	}
	a.validateMetadataServers(ps)
}

// validateMetadataServers wants the protected resource metadata to name an
// authorization server, as the MCP authorization spec does, wherever
// callers present tokens an authorization server issues: the JWT issuer
// stands in only if it is a URL. Static tokens alone are API keys no
// server issues: no metadata is published for them (auth.Resource). Client
// certificates need no token.
func (a *Auth) validateMetadataServers(ps *problems) {
	if len(a.AuthorizationServers) > 0 || a.JWT.Issuer == "" || a.PrincipalFrom == PrincipalFromClientCert {
		return
	}
	if secureURLProblem(a.JWT.Issuer) != "" {
		ps.add("auth.authorization_servers", "must name at least one authorization server: the protected resource metadata tells MCP clients where to get a token (it would be auth.jwt.issuer, but %q is not an https URL)", a.JWT.Issuer)
	}
}

// checkSecureURL wants an absolute https URL, or http on a loopback host.
func checkSecureURL(ps *problems, path, raw string) {
	if msg := secureURLProblem(raw); msg != "" {
		ps.add(path, "%s", msg)
	}
}

// secureURLProblem is what checkSecureURL says of raw ("" when nothing).
func secureURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return "must be an absolute URL"
	case !loopback.Secure(u):
		return "must be https (http only on a loopback host)"
	}
	return ""
}

func (l RateLimit) validate(ps *problems, path string) {
	if l.Rate < 0 || l.Rate > 1e6 {
		ps.add(path+".rate", "must be between 0 (off) and 1000000 requests a second")
	}
	if l.Rate > 0 && (l.Burst < 1 || l.Burst > 1e6) {
		ps.add(path+".burst", "must be between 1 and 1000000")
	}
}

// validateTLS checks the listeners' TLS files go together.
func (c *Config) validateTLS(ps *problems) {
	t := c.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		ps.add("tls", "cert_file and key_file go together")
	}
	if t.ClientCAFile != "" && t.CertFile == "" {
		ps.add("tls.client_ca_file", "needs cert_file and key_file")
	}
	if c.Auth.PrincipalFrom == PrincipalFromClientCert && t.ClientCAFile == "" {
		ps.add("auth.principal_from", "client_cert needs tls.client_ca_file (mutual TLS)")
	}
}
