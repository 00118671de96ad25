package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

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
	if s.MaxURIsPerStream < 1 || s.MaxURIsPerStream > 1e6 {
		ps.add("subscriptions.max_uris_per_stream", "must be between 1 and 1000000")
	}
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
		if !httpguts.ValidHeaderFieldName(h) {
			bad(fmt.Sprintf("credential_headers[%d]", i), "%q is not a valid HTTP header name", h)
		}
	}
	if c.Redis.Enabled() {
		if len(c.Secret) < 16 {
			bad("secret", "is required with redis (at least 16 characters): every replica computes the same credential fingerprints with it, and private entries in Redis are sealed under it")
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
}

func (l RateLimit) validate(ps *problems, path string) {
	if l.Rate < 0 || l.Rate > 1e6 {
		ps.add(path+".rate", "must be between 0 (off) and 1000000 requests a second")
	}
	if l.Rate > 0 && (l.Burst < 1 || l.Burst > 1e6) {
		ps.add(path+".burst", "must be between 1 and 1000000")
	}
}
