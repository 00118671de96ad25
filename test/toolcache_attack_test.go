package test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Attacks on the tool cache (issue #21): arguments an upstream tells
// apart must never share an entry.

// Two strings that differ only in a lone surrogate are different
// arguments to an upstream that keeps them (the TypeScript SDK, on
// JavaScript strings); Go's JSON decoding makes each U+FFFD, so a key
// made through it gives both one entry, and the second caller gets the
// first one's answer.
func TestToolCacheKeepsLoneSurrogatesApart(t *testing.T) {
	node := nodeOrSkip(t)
	script := tsScript(t, "cached-stdio-server.mjs")
	p := startProxy(t, fmt.Sprintf("upstreams:\n  - name: ts\n    command: [%q, %q]\n    %s\n", node, script, toolCacheYAML("60s", "public")))
	first := callToolAs(t, p.URL, "", "ts_codes", `{"q":"\ud800"}`)
	if !strings.HasPrefix(first.Text, "codes=d800 ") {
		t.Fatalf("the first call: %+v", first)
	}
	for _, q := range []string{`\udbff`, `\ufffd`} {
		got := callToolAs(t, p.URL, "", "ts_codes", fmt.Sprintf(`{"q":"%s"}`, q))
		if want := "codes=" + strings.TrimPrefix(q, `\u`) + " "; !strings.HasPrefix(got.Text, want) {
			t.Errorf(`q "%s" was answered %q (cache %v), the answer to q "\ud800"`, q, got.Text, got.Cache)
		}
	}
	if again := callToolAs(t, p.URL, "", "ts_codes", `{"q":"\ud800"}`); again.Cache == nil || again.Text != first.Text {
		t.Errorf("the same call again: %+v", again)
	}
}

// Only Manifold says an answer came from its cache: an upstream's own
// `io.manifold/cache` in a result's _meta is dropped, for a modern caller
// and a legacy one, with or without a tool cache; the upstream's other
// _meta members pass.
func TestUpstreamCannotClaimTheCacheMarker(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "liar", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "lie", InputSchema: objectSchema(`{}`), Annotations: readOnly}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r := textResult("fresh from the upstream")
		r.Meta = mcp.Meta{"io.manifold/cache": map[string]any{"tier": "memory", "ageMs": 1}, "example.com/kept": "yes"}
		return r, nil
	})
	up := modernSDK(t, s)
	for _, cache := range []string{"", toolCacheYAML("60s", "public")} {
		p := startProxy(t, "upstreams:"+httpUpstreamYAML("u", up.URL, cache))
		a := callToolAs(t, p.URL, "", "u_lie", `{}`)
		if a.Cache != nil || !strings.Contains(string(a.Raw.Result), `"example.com/kept":"yes"`) {
			t.Errorf("tool_cache %q, a fresh answer's _meta: %s", cache, a.Raw.Result)
		}
		sid, _ := initialize(t, p.URL, "2025-11-25")
		legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		r := legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"u_lie","arguments":{}}}`)
		if strings.Contains(string(r.Result), "io.manifold/cache") || !strings.Contains(string(r.Result), "fresh from the upstream") {
			t.Errorf("tool_cache %q, a legacy caller's answer: %s", cache, r.Body)
		}
	}
}

// A legacy caller that declares no capabilities (so takes no questions)
// is served from the tool cache like any other: its second call does not
// reach the upstream. (A 2026-07-28 caller declares other capabilities,
// which key another entry.)
func TestToolCacheServesALegacyCallerWithoutCapabilities(t *testing.T) {
	counts := &toolCounts{n: map[string]int{}}
	up := modernSDK(t, cachedToolServer(counts))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("t", up.URL, toolCacheYAML("60s", "public")))
	sid, _ := initialize(t, p.URL, "2025-11-25")
	legacyPost(t, p.URL, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i := range 2 {
		r := legacyPost(t, p.URL, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t_search","arguments":{"q":"l","n":1}}}`, i+2))
		if !strings.Contains(string(r.Result), "search q=l n=1") || strings.Contains(string(r.Result), "resultType") {
			t.Fatalf("legacy call %d: %s", i+1, r.Body)
		}
	}
	if n := counts.get(callKey("search", "l", 1)); n != 1 {
		t.Errorf("two legacy calls of a cached read-only tool: %d upstream calls", n)
	}
}
