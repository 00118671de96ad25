package config

import (
	"strings"
	"testing"
	"time"
)

const twoUpstreams = "upstreams: [{name: docs, url: http://x/mcp}, {name: github, url: http://y/mcp}]\n"

// Every name and glob an endpoint refers to is checked, each problem at
// its key, and two endpoints never serve one path.
func TestEndpointProblemsNamePaths(t *testing.T) {
	jwt := "auth: {jwt: {issuer: https://idp.example.com, audiences: [m], jwks_url: https://idp.example.com/jwks}}\n"
	for _, c := range []struct{ yaml, want string }{
		{"endpoints: [{upstreams: [docs]}]", "endpoints[0].path: is required"},
		{"endpoints: [{path: mcp/dev}]", `endpoints[0].path: "mcp/dev" must start with /`},
		{"endpoints: [{path: /mcp/dev/}]", `endpoints[0].path: "/mcp/dev/" must start with / and not end with one`},
		{"endpoints: [{path: /mcp//dev}]", "endpoints[0].path: \"/mcp//dev\" must be a clean path"},
		{"endpoints: [{path: /mcp/../ui}]", "must be a clean path"},
		{"endpoints: [{path: '/mcp/dev team'}]", "each segment takes letters, digits"},
		{"endpoints: [{path: /mcp}]", `endpoints[0].path: "/mcp" would serve /mcp, which Manifold serves itself`},
		{"endpoints: [{path: /metrics}]", "would serve /metrics"},
		{"endpoints: [{path: /ui/state}]", "is under /ui/"},
		{"endpoints: [{path: /.well-known/x}]", "is under /.well-known/"},
		{"endpoints: [{path: /a}, {path: /a}]", "endpoints[1].path: /a is already served by endpoints[0].path"},
		{"endpoints: [{path: /a}, {path: /a/sse}]", "endpoints[1].path: /a/sse is already served by endpoints[0].path"},
		{"endpoints: [{path: /a, upstreams: [docs, nosuch]}]", `endpoints[0].upstreams[1]: "nosuch" is not the name of a configured upstream`},
		{"endpoints: [{path: /a, upstreams: [docs, docs]}]", `endpoints[0].upstreams[1]: "docs" is named twice`},
		{"endpoints: [{path: /a, tools: {allow: ['docs_[']}}]", `endpoints[0].tools.allow[0]: "docs_[" is not a valid glob`},
		{"endpoints: [{path: /a, prompts: {deny: ['']}}]", "endpoints[0].prompts.deny[0]:"},
		{"endpoints: [{path: /a, resources: {allow: ['docs+\\']}}]", "endpoints[0].resources.allow[0]:"},
		{"endpoints: [{path: /a, toolz: {}}]", `endpoints[0].toolz: unknown key (did you mean "tools"?)`},
		{"endpoints: [{path: /a, access: [{claim: groups, values: [dev]}]}]", "endpoints[0].access: needs auth.jwt or auth.principal_from"},
		{jwt + "endpoints: [{path: /a, access: [{claim: groups}]}]", "endpoints[0].access[0].values: must name at least one value"},
		{"upstreams: [{name: a, url: http://x/mcp, tool_cache: {ttl: -1s}}]", "upstreams[0].tool_cache.ttl: must not be negative"},
		{"upstreams: [{name: a, url: http://x/mcp, tool_cache: {ttl: 2h}}]", "upstreams[0].tool_cache.ttl: must be at most cache.max_ttl (1h0m0s)"},
		{"upstreams: [{name: a, url: http://x/mcp, tool_cache: {ttl: 1m, scope: shared}}]", `upstreams[0].tool_cache.scope: must be private or public, not "shared"`},
		{"upstreams: [{name: a, url: http://x/mcp, tool_cache: {ttl: 1m, tools: ['[']}}]", "upstreams[0].tool_cache.tools[0]:"},
	} {
		y := c.yaml
		if !strings.Contains(y, "upstreams: [") {
			y += "\n" + twoUpstreams
		}
		_, problems := Parse([]byte(y), env(nil))
		found := false
		for _, p := range problems {
			found = found || strings.Contains(p.String(), c.want)
		}
		if !found {
			t.Errorf("%s\n  want a problem containing %q, got %v", c.yaml, c.want, problems)
		}
	}
}

func TestEndpointsAndToolCacheParse(t *testing.T) {
	cfg, problems := Parse([]byte(twoUpstreams+`
endpoints:
  - path: /mcp/dev
    upstreams: [docs, github]
    tools: {allow: ["docs_*", "github_get_*"], deny: ["*_delete*"]}
    resources: {allow: ["docs+file:///guides/*"]}
  - path: /mcp/ops
`), env(nil))
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if len(cfg.Endpoints) != 2 || cfg.Endpoints[0].Tools.Allow[1] != "github_get_*" || cfg.Endpoints[1].Upstreams != nil {
		t.Errorf("endpoints: %+v", cfg.Endpoints)
	}
	cfg, problems = Parse([]byte("upstreams: [{name: a, url: http://x/mcp, tool_cache: {ttl: 30s}}]"), env(nil))
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if tc := cfg.Upstreams[0].ToolCache; tc.TTL != 30*time.Second || tc.Scope != "private" || tc.StaleIfError {
		t.Errorf("tool_cache defaults: %+v", tc)
	}
	cfg, _ = Parse([]byte("cache: {memory: {max_bytes: 0}}\nupstreams: [{name: a, url: http://x/mcp, tool_cache: {ttl: 30s}}]"), env(nil))
	if ws := cfg.Warnings(); len(ws) != 1 || !strings.Contains(ws[0].String(), "upstreams[0].tool_cache: caches nothing") {
		t.Errorf("warnings: %v", ws)
	}
}
