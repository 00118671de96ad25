package config

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/manifold-mcp/manifold/internal/mcp"
)

var upstreamName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// hopHeaders are connection-scoped or owned by Manifold's own protocol
// handling; forwarding them would break the upstream exchange.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Host": true,
	"Content-Length": true, "Content-Type": true, "Accept": true,
	"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Mcp-Method": true, "Mcp-Name": true,
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
	if len(u.Command) == 0 && (len(u.Env) > 0 || u.Dir != "") {
		bad("env", "env and dir apply to stdio upstreams (command) only")
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
		if !httpguts.ValidHeaderFieldName(name) {
			bad("headers."+name, "not a valid HTTP header name")
		} else if hopHeaders[http.CanonicalHeaderKey(name)] {
			bad("headers."+name, "is managed by Manifold and cannot be set")
		}
	}
	for j, name := range u.ForwardHeaders {
		if !httpguts.ValidHeaderFieldName(name) {
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
