package test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolsServer is a go-sdk server whose tools answer "SERVER:TOOL", listed
// pageSize at a time (0: the SDK's default), in the SDK's order (by name).
func toolsServer(server string, pageSize int, tools ...string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: server, Version: "1"}, &mcp.ServerOptions{PageSize: pageSize})
	for _, name := range tools {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult(server + ":" + name), nil
		})
	}
	return s
}

// callAs calls a tool with a bearer token ("" for none) and returns what it
// answered: its text, or its error message.
func callAs(t *testing.T, url, token, name string) string {
	t.Helper()
	h := withToken(headers("tools/call", name), token)
	r := post(t, url, h, rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":{}`, name)))
	if r.Error != nil {
		return "error: " + r.Error.Message
	}
	var res callResult
	r.result(t, &res)
	return res.Content[0].Text
}

// Without namespaces, a name two upstreams list is the first's in
// configuration order, among those the caller may see: a caller the first
// upstream's access rules hide reaches the second, and one they admit
// reaches the first. Neither hides the name from the other.
func TestNameOwnerWithinCallersView(t *testing.T) {
	is := newIssuer(t)
	vault := modernSDK(t, toolsServer("vault", 0, "echo"))
	open := modernSDK(t, toolsServer("open", 0, "echo"))
	p := startProxy(t, is.authYAML("")+"namespace: none\nupstreams:"+
		httpUpstreamYAML("vault", vault.URL, "access: [{claim: groups, values: [eng]}]")+httpUpstreamYAML("open", open.URL))
	eng := is.mint("rsa-1", claims{"sub": "erin", "groups": []string{"eng"}})
	sales := is.mint("rsa-1", claims{"sub": "sam", "groups": []string{"sales"}})
	for i, c := range []struct{ token, want string }{{eng, "vault:echo"}, {sales, "open:echo"}, {eng, "vault:echo"}, {sales, "open:echo"}} {
		if got := callAs(t, p.URL, c.token, "echo"); got != c.want {
			t.Errorf("call %d: %q, want %q", i, got, c.want)
		}
	}
}

// Without namespaces, who serves a name is learnt per set of upstreams: a
// reload that renames an upstream, or moves a name to another, routes the
// name where the new set lists it.
func TestNameOwnersFollowReload(t *testing.T) {
	one := modernSDK(t, toolsServer("one", 0, "echo"))
	two := modernSDK(t, toolsServer("two", 0, "echo", "only"))
	p, reload := startReloadable(t, "namespace: none\nupstreams:"+httpUpstreamYAML("a", one.URL)+httpUpstreamYAML("b", two.URL))
	if got := callAs(t, p.URL, "", "echo"); got != "one:echo" {
		t.Fatalf("before the reload: %q", got)
	}
	reload("namespace: none\nupstreams:" + httpUpstreamYAML("renamed", one.URL) + httpUpstreamYAML("b", two.URL))
	if got := callAs(t, p.URL, "", "echo"); got != "one:echo" {
		t.Errorf("after renaming its upstream: %q", got)
	}
	reload("namespace: none\nupstreams:" + httpUpstreamYAML("b", two.URL) + httpUpstreamYAML("renamed", one.URL))
	if got := callAs(t, p.URL, "", "echo"); got != "two:echo" {
		t.Errorf("after reordering: %q", got)
	}
}

// Without namespaces, a merged list names each tool once, the first
// upstream's in configuration order, however the upstreams' pages fall.
func TestMergedListNamesEachToolOnce(t *testing.T) {
	a := modernSDK(t, toolsServer("a", 1, "aaa", "zz"))
	b := modernSDK(t, toolsServer("b", 0, "zz"))
	p := startProxy(t, "namespace: none\nupstreams:"+httpUpstreamYAML("a", a.URL)+httpUpstreamYAML("b", b.URL))
	if got := names(listAll(t, p.URL, "tools/list"), "tools"); !slices.Equal(got, []string{"aaa", "zz"}) {
		t.Errorf("tools/list names %v, want [aaa zz]", got)
	}
	if got := callAs(t, p.URL, "", "zz"); got != "a:zz" {
		t.Errorf("zz answered %q", got)
	}
}

// An unknown tool or prompt is named as the caller sent it, prefix and
// all, not as its upstream would spell it.
func TestUnknownNameAsSent(t *testing.T) {
	up := modernSDK(t, sdkToolServer("delta", sdkOptions{}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("delta", up.URL))
	for _, c := range []struct{ method, name string }{{"tools/call", "delta_nope"}, {"prompts/get", "delta_nope"}} {
		r := post(t, p.URL, headers(c.method, c.name), rpcBody(1, c.method, fmt.Sprintf(`"name":%q,"arguments":{}`, c.name)))
		r.wantError(t, http.StatusBadRequest, -32602)
		if !strings.Contains(r.Error.Message, `"delta_nope"`) {
			t.Errorf("%s: %q does not name delta_nope", c.method, r.Error.Message)
		}
	}
}
