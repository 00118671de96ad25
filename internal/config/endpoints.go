package config

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/glob"
)

// Endpoint is one curated MCP endpoint beside /mcp: a path of its own,
// serving a view of the upstreams.
type Endpoint struct {
	// Path is where it is served (/mcp/dev); its 2024-11-05 HTTP+SSE
	// transport is Path/sse and Path/messages.
	Path string `yaml:"path"`
	// Upstreams names the configured upstreams it serves; empty: all.
	Upstreams []string `yaml:"upstreams"`
	// Tools, Prompts and Resources select by the namespaced names and URIs
	// the endpoint lists (glob syntax, '*' matching '/' too).
	Tools     Filter `yaml:"tools"`
	Prompts   Filter `yaml:"prompts"`
	Resources Filter `yaml:"resources"`
	// Access, when set, admits only principals with a matching claim (any
	// rule); to the others the endpoint answers 404, as a path nothing is
	// served on.
	Access []AccessRule `yaml:"access"`
	// Catalog is how its tools are shown: full (every tool, the default)
	// or search (two tools, find_tools and call_tool, over all of them).
	Catalog string `yaml:"catalog"`
}

// The values of endpoints[].catalog.
const (
	CatalogFull   = "full"
	CatalogSearch = "search"
)

// ToolCache caches the results of an upstream's read-only tools.
type ToolCache struct {
	// TTL is how long a result is served from the cache; 0 (the default)
	// turns the tool cache off.
	TTL time.Duration `yaml:"ttl"`
	// Scope is private (each caller's own entries, keyed as the
	// upstream's private reads: by principal or by credential) or public.
	Scope string `yaml:"scope"`
	// Tools are globs (path.Match syntax) of the upstream's own tool
	// names that may be cached; empty: every read-only one.
	Tools []string `yaml:"tools"`
	// StaleIfError serves an expired result (up to cache.stale_if_error
	// past its ttl) while the upstream cannot be reached.
	StaleIfError bool `yaml:"stale_if_error"`
}

// The paths an endpoint may not take: those Manifold serves itself.
var reservedPaths = []string{"/mcp", "/sse", "/messages", CallbackPath, "/healthz", "/readyz", "/metrics", "/ui", "/reload"}

// reservedPrefixes start paths Manifold serves a tree of.
var reservedPrefixes = []string{"/.well-known/", "/debug/", "/oauth/", "/ui/"}

// endpointSegment is one segment of an endpoint's path.
var endpointSegment = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

// maxEndpointPath bounds an endpoint's path.
const maxEndpointPath = 200

func (c *Config) validateEndpoints(ps *problems) {
	upstreams := map[string]bool{}
	for _, u := range c.Upstreams {
		upstreams[u.Name] = true
	}
	paths := map[string]string{} // every path served, → the key that serves it
	for i, e := range c.Endpoints {
		at := fmt.Sprintf("endpoints[%d]", i)
		if e.validatePath(ps, at+".path") {
			for _, p := range []string{e.Path, e.Path + "/sse", e.Path + "/messages"} {
				if prev, dup := paths[p]; dup {
					ps.add(at+".path", "%s is already served by %s", p, prev)
				}
				paths[p] = at + ".path"
			}
		}
		for j, name := range e.Upstreams {
			if !upstreams[name] {
				ps.add(fmt.Sprintf("%s.upstreams[%d]", at, j), "%q is not the name of a configured upstream", name)
			}
			if slices.Index(e.Upstreams, name) < j {
				ps.add(fmt.Sprintf("%s.upstreams[%d]", at, j), "%q is named twice", name)
			}
		}
		for _, kf := range []struct {
			key string
			f   Filter
		}{{"tools", e.Tools}, {"prompts", e.Prompts}, {"resources", e.Resources}} {
			kf.f.validateGlobs(ps, at+"."+kf.key)
		}
		c.validateAccess(ps, at+".access", e.Access)
		if e.Catalog != "" && e.Catalog != CatalogFull && e.Catalog != CatalogSearch {
			ps.add(at+".catalog", "%q must be full or search", e.Catalog)
		}
	}
}

// validatePath checks an endpoint's path and reports whether it is sound
// enough to compare with the others.
func (e *Endpoint) validatePath(ps *problems, at string) bool {
	p := e.Path
	switch {
	case p == "":
		ps.add(at, "is required")
		return false
	case len(p) > maxEndpointPath:
		ps.add(at, "must be at most %d bytes", maxEndpointPath)
		return false
	case p[0] != '/' || p == "/" || strings.HasSuffix(p, "/"):
		ps.add(at, "%q must start with / and not end with one, as /mcp/dev does", p)
		return false
	case path.Clean(p) != p:
		ps.add(at, "%q must be a clean path (no //, . or .. segments)", p)
		return false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if !endpointSegment.MatchString(seg) {
			ps.add(at, "%q: each segment takes letters, digits and . _ ~ - only", p)
			return false
		}
	}
	for _, r := range reservedPaths {
		for _, own := range []string{p, p + "/sse", p + "/messages"} {
			if own == r {
				ps.add(at, "%q would serve %s, which Manifold serves itself", p, r)
				return false
			}
		}
	}
	for _, r := range reservedPrefixes {
		if strings.HasPrefix(p+"/", r) {
			ps.add(at, "%q is under %s, which Manifold serves itself", p, r)
			return false
		}
	}
	return true
}

// validateGlobs checks an endpoint's allow and deny globs.
func (f Filter) validateGlobs(ps *problems, key string) {
	for _, l := range []struct {
		list  string
		globs []string
	}{{"allow", f.Allow}, {"deny", f.Deny}} {
		for j, g := range l.globs {
			if _, err := glob.Compile(g); err != nil {
				ps.add(fmt.Sprintf("%s.%s[%d]", key, l.list, j), "%q is not a valid glob: %v", g, err)
			}
		}
	}
}

func (t *ToolCache) applyDefaults() {
	setDefault(&t.Scope, "private")
}

// validate checks an upstream's tool cache against the cache it lives in.
func (t *ToolCache) validate(bad complain, maxTTL time.Duration) {
	switch {
	case t.TTL < 0:
		bad("tool_cache.ttl", "must not be negative")
	case t.TTL > 0 && t.TTL < time.Millisecond:
		bad("tool_cache.ttl", "must be at least 1ms (or 0: off)")
	case t.TTL > maxTTL:
		bad("tool_cache.ttl", "must be at most cache.max_ttl (%s)", maxTTL)
	}
	if t.Scope != "private" && t.Scope != "public" {
		bad("tool_cache.scope", "must be private or public, not %q", t.Scope)
	}
	for j, g := range t.Tools {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			bad(fmt.Sprintf("tool_cache.tools[%d]", j), "%q is not a valid glob (path.Match syntax)", g)
		}
	}
}

// toolCacheWarnings are the tool caches that are likely mistakes: a
// public one on an upstream given the caller's own credential, which then
// answers each caller as themselves, unless it answers everyone alike
// (oauth mode user, which certainly does, is refused: validateOAuth); and
// those that can hold nothing: with neither the memory tier nor Redis,
// there is nowhere to keep a result.
func (c *Config) toolCacheWarnings(ws *problems) {
	for i, u := range c.Upstreams {
		for _, h := range u.ForwardHeaders {
			if u.ToolCache.TTL > 0 && u.ToolCache.Scope == "public" && slices.ContainsFunc(c.Cache.CredentialHeaders, func(c string) bool { return strings.EqualFold(c, h) }) {
				ws.add(fmt.Sprintf("upstreams[%d].tool_cache.scope", i), "public, though the upstream is given the caller's %s (forward_headers): one caller's results are served to every caller; make it private unless the upstream answers everyone alike", h)
				break
			}
		}
	}
	if *c.Cache.Memory.MaxBytes > 0 || c.Cache.Redis.Enabled() {
		return
	}
	for i, u := range c.Upstreams {
		if u.ToolCache.TTL > 0 {
			ws.add(fmt.Sprintf("upstreams[%d].tool_cache", i), "caches nothing: cache.memory.max_bytes is 0 and there is no cache.redis")
		}
	}
}
