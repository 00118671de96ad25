package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// endpointsFixture is a Manifold trusting a test issuer in front of four
// upstreams of three kinds, and two curated endpoints beside /mcp:
//
//	docs    go-sdk, modern, HTTP, pages of 2; tools filtered: no progress
//	github  mcp-go, both eras, HTTP
//	vault   go-sdk, modern, HTTP; access: groups ops
//	local   go-sdk, stdio child
//
//	/mcp/dev  docs, github, vault, local; tools docs_*, github_*, local_*,
//	          vault_* but not *_wait; prompts docs_*; resources
//	          docs+test://docs/* (not */secret), local+*, vault+*;
//	          access: groups dev
//	/mcp/ops  github, vault; access: groups ops
//
// with tokens for dev (erin), ops (olga), dev and ops (dana) and sales
// (sam, neither).
type endpointsFixture struct {
	p                    *proxy
	base                 string // the listener's origin
	docs, vault          *mcp.Server
	dev, ops, both, sale string
	is                   *issuer
}

func newEndpointsFixture(t *testing.T, extra string) *endpointsFixture {
	is := newIssuer(t)
	docs := sdkToolServer("docs", sdkOptions{resources: 5, pageSize: 2})
	vault := sdkToolServer("vault", sdkOptions{resources: 2})
	docsUp, _ := trackedModern(t, docs)
	vaultUp, _ := trackedModern(t, vault)
	github := serveHTTP(t, mcpgoToolServer("github", true))
	p := startProxy(t, is.authYAML("")+"cursor_secret: endpoints-cursor-secret-0123\n"+extra+"upstreams:"+
		httpUpstreamYAML("docs", docsUp.URL, "tools: {deny: [progress]}")+
		httpUpstreamYAML("github", github.URL)+
		httpUpstreamYAML("vault", vaultUp.URL, "access: [{claim: groups, values: [ops]}]")+
		childUpstream("local", "sdk-tools:local")+`
endpoints:
  - path: /mcp/dev
    upstreams: [docs, github, vault, local]
    tools: {allow: ["docs_*", "github_*", "local_*", "vault_*"], deny: ["*_wait"]}
    prompts: {allow: ["docs_*"]}
    resources: {allow: ["docs+test://docs/*", "local+*", "vault+*"], deny: ["*/secret"]}
    access: [{claim: groups, values: [dev]}]
  - path: /mcp/ops
    upstreams: [github, vault]
    access: [{claim: groups, values: [ops]}]
`)
	f := &endpointsFixture{p: p, base: origin(p), docs: docs, vault: vault, is: is,
		dev:  is.mint("rsa-1", claims{"sub": "erin", "groups": []string{"dev"}}),
		ops:  is.mint("rsa-1", claims{"sub": "olga", "groups": []string{"ops"}}),
		both: is.mint("rsa-1", claims{"sub": "dana", "groups": []string{"dev", "ops"}}),
		sale: is.mint("rsa-1", claims{"sub": "sam", "groups": []string{"sales"}}),
	}
	return f
}

// as returns the headers of a 2026-07-28 request with tok's bearer.
func as(tok string) func(method, name string) http.Header {
	return func(method, name string) http.Header {
		h := headers(method, name)
		if tok != "" {
			h.Set("Authorization", "Bearer "+tok)
		}
		return h
	}
}

// listAllAs follows cursors through a merged list at url as tok (none:
// no Authorization).
func listAllAs(t testing.TB, url, method, tok string) []listResult {
	t.Helper()
	var pages []listResult
	cursor := ""
	for i := 0; i < 100; i++ {
		params := ""
		if cursor != "" {
			params = fmt.Sprintf(`"cursor":%q`, cursor)
		}
		var page listResult
		post(t, url, as(tok)(method, ""), rpcBody(i+1, method, params)).result(t, &page)
		pages = append(pages, page)
		if page.NextCursor == "" {
			return pages
		}
		cursor = page.NextCursor
	}
	t.Fatal("more than 100 pages")
	return nil
}

// ids are the identities of every item of every page, sorted.
func ids(pages []listResult, member string) []string {
	var out []string
	for _, p := range pages {
		var items []map[string]any
		key := "name"
		switch member {
		case "tools":
			items = p.Tools
		case "prompts":
			items = p.Prompts
		case "resources":
			items, key = p.Resources, "uri"
		case "resourceTemplates":
			items, key = p.ResourceTemplates, "uriTemplate"
		}
		for _, it := range items {
			out = append(out, it[key].(string))
		}
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// The view of /mcp/dev over every list, followed page by page, as a
// principal of dev: its upstreams, less those its own access rules hide
// (vault is ops'), less what the upstreams' filters hide (docs_progress),
// less what the endpoint's globs leave out.
func TestEndpointListsShowItsView(t *testing.T) {
	f := newEndpointsFixture(t, "")
	dev := f.base + "/mcp/dev"
	want := map[string][]string{
		"tools/list": sorted("docs_echo", "docs_link", "docs_ask", "docs_region",
			"github_echo", "github_progress",
			"local_echo", "local_progress", "local_link", "local_ask", "local_region"),
		"prompts/list": {"docs_greet"},
		"resources/list": sorted("docs+test://docs/0", "docs+test://docs/1", "docs+test://docs/2", "docs+test://docs/3", "docs+test://docs/4",
			"local+test://local/0", "local+test://local/1", "local+test://local/2", "local+test://shared"),
		"resources/templates/list": {"docs+test://docs/items/{id}", "local+test://local/items/{id}"},
	}
	member := map[string]string{"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources", "resources/templates/list": "resourceTemplates"}
	for method, w := range want {
		pages := listAllAs(t, dev, method, f.dev)
		if got := ids(pages, member[method]); !slices.Equal(got, w) {
			t.Errorf("%s at /mcp/dev as dev:\n got %v\nwant %v", method, got, w)
		}
		if method == "resources/list" && len(pages) < 3 {
			t.Errorf("resources/list took %d pages; docs pages by 2, so at least 3", len(pages))
		}
		// The main endpoint still serves everything the caller may see.
		if all := ids(listAllAs(t, f.p.URL, method, f.dev), member[method]); method != "resources/templates/list" && len(all) <= len(w) {
			t.Errorf("%s at /mcp: %d items, want more than the view's %d", method, len(all), len(w))
		}
	}
	// The intersection the other way: ops may see vault, and /mcp/ops
	// serves github and vault only, every tool of them.
	got := ids(listAllAs(t, f.base+"/mcp/ops", "tools/list", f.ops), "tools")
	if w := sorted("github_echo", "github_progress", "github_wait", "vault_echo", "vault_progress", "vault_wait", "vault_link", "vault_ask", "vault_region"); !slices.Equal(got, w) {
		t.Errorf("tools at /mcp/ops as ops:\n got %v\nwant %v", got, w)
	}
	// dana is in both groups: /mcp/dev now shows vault too, within its globs.
	got = ids(listAllAs(t, dev, "resources/list", f.both), "resources")
	if !slices.Contains(got, "vault+test://vault/0") || slices.Contains(got, "vault+test://vault/secret") || slices.Contains(got, "docs+test://docs/secret") {
		t.Errorf("resources at /mcp/dev as dev and ops: %v", got)
	}
	var d struct {
		Capabilities map[string]any `json:"capabilities"`
	}
	post(t, f.base+"/mcp/ops", as(f.ops)("server/discover", ""), rpcBody(1, "server/discover", "")).result(t, &d)
	if d.Capabilities["prompts"] == nil || d.Capabilities["tools"] == nil {
		t.Errorf("server/discover at /mcp/ops: %v", d.Capabilities)
	}
}

// What the view leaves out answers exactly as what does not exist: a
// tool, prompt, completion ref or resource outside it gets the error of a
// name or URI no upstream serves, and never reaches its upstream.
func TestEndpointRefusesWhatItDoesNotShow(t *testing.T) {
	f := newEndpointsFixture(t, "")
	dev := f.base + "/mcp/dev"
	call := func(name string) *rawResponse {
		return post(t, dev, as(f.dev)("tools/call", name), rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":{"text":"x"}`, name)))
	}
	if text := toolTextAs(t, dev, f.dev, "docs_echo"); text != "docs: x" {
		t.Errorf("docs_echo at /mcp/dev: %q", text)
	}
	if text := toolTextAs(t, dev, f.dev, "local_echo"); text != "local: x" {
		t.Errorf("local_echo (stdio) at /mcp/dev: %q", text)
	}
	missing := call("docs_nosuch")
	for _, name := range []string{"docs_wait", "docs_progress", "vault_echo", "nosuch_echo"} {
		r := call(name)
		if r.Error == nil || r.Status != missing.Status || r.Error.Code != missing.Error.Code || strings.ReplaceAll(r.Error.Message, name, "X") != strings.ReplaceAll(missing.Error.Message, "docs_nosuch", "X") {
			t.Errorf("tools/call %s at /mcp/dev: HTTP %d %s; a tool that does not exist: HTTP %d %s", name, r.Status, r.Body, missing.Status, missing.Body)
		}
	}
	if n := events.get(events.started, "docs"); n != 0 {
		t.Errorf("docs_wait started %d times", n)
	}
	prompt := func(name string) *rawResponse {
		return post(t, dev, as(f.dev)("prompts/get", name), rpcBody(1, "prompts/get", fmt.Sprintf(`"name":%q,"arguments":{"who":"x"}`, name)))
	}
	if r := prompt("docs_greet"); r.Error != nil {
		t.Errorf("docs_greet: %s", r.Body)
	}
	prompt("github_greet").wantError(t, http.StatusBadRequest, -32602)
	complete := func(ref string) *rawResponse {
		return post(t, dev, as(f.dev)("completion/complete", ""), rpcBody(1, "completion/complete", `"ref":`+ref+`,"argument":{"name":"who","value":""}`))
	}
	var c struct {
		Completion struct{ Values []string } `json:"completion"`
	}
	complete(`{"type":"ref/prompt","name":"docs_greet"}`).result(t, &c)
	if !slices.Contains(c.Completion.Values, "docs-alice") {
		t.Errorf("completion of docs_greet: %v", c.Completion.Values)
	}
	complete(`{"type":"ref/resource","uri":"docs+test://docs/items/{id}"}`).result(t, &c)
	if !slices.Contains(c.Completion.Values, "ref=test://docs/items/{id}") {
		t.Errorf("completion of the docs template: %v", c.Completion.Values)
	}
	complete(`{"type":"ref/prompt","name":"github_greet"}`).wantError(t, http.StatusBadRequest, -32602)
	complete(`{"type":"ref/resource","uri":"github+test://github/0"}`).wantError(t, http.StatusBadRequest, -32602)
	read := func(uri string) *rawResponse {
		return post(t, dev, as(f.dev)("resources/read", uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	}
	var rr readResult
	read("docs+test://docs/items/7").result(t, &rr)
	if len(rr.Contents) != 1 || rr.Contents[0].Text != "docs item 7" {
		t.Errorf("a read through the docs template: %+v", rr)
	}
	for _, uri := range []string{"docs+test://docs/secret", "docs+test://shared", "github+test://github/0", "vault+test://vault/0"} {
		r := read(uri)
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(string(r.Error.Data), uri) {
			t.Errorf("read %s at /mcp/dev: HTTP %d %s", uri, r.Status, r.Body)
		}
	}
	// The same reads at /mcp: the view is the endpoint's, not the caller's.
	for _, uri := range []string{"docs+test://docs/secret", "docs+test://shared"} {
		if r := post(t, f.p.URL, as(f.dev)("resources/read", uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))); r.Error != nil {
			t.Errorf("read %s at /mcp: %s", uri, r.Body)
		}
	}
}

func toolTextAs(t testing.TB, url, tok, name string) string {
	t.Helper()
	var r callResult
	post(t, url, as(tok)("tools/call", name), rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":{"text":"x"}`, name))).result(t, &r)
	if r.ResultType != "complete" || len(r.Content) == 0 {
		t.Fatalf("%s: %+v", name, r)
	}
	return r.Content[0].Text
}

// A caller an endpoint's access rules do not admit gets, for every
// request of every kind at every one of its paths, the answer of a path
// nothing is served on, byte for byte; a caller without credentials gets
// the same challenge there as anywhere beside it.
func TestEndpointHiddenFromWhomItDoesNotAdmit(t *testing.T) {
	f := newEndpointsFixture(t, "")
	type req struct{ method, path, body string }
	reqs := []req{
		{http.MethodPost, "/mcp/dev", rpcBody(1, "tools/list", "")},
		{http.MethodGet, "/mcp/dev", ""},
		{http.MethodDelete, "/mcp/dev", ""},
		{http.MethodGet, "/mcp/dev/sse", ""},
		{http.MethodPost, "/mcp/dev/messages?sessionId=x", `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
	}
	send := func(r req, tok string) *rawResponse {
		h := as(tok)("tools/list", "")
		return rawDo(t, r.method, f.base+r.path, h, r.body)
	}
	nothing := send(req{http.MethodPost, "/mcp/nothing-here", rpcBody(1, "tools/list", "")}, f.ops)
	if nothing.Status != http.StatusNotFound {
		t.Fatalf("a path nothing is served on: HTTP %d %s", nothing.Status, nothing.Body)
	}
	for _, r := range reqs {
		for who, tok := range map[string]string{"ops": f.ops, "sales": f.sale} {
			got := send(r, tok)
			if got.Status != nothing.Status || string(got.Body) != string(nothing.Body) || got.Header.Get("Content-Type") != nothing.Header.Get("Content-Type") {
				t.Errorf("%s %s as %s: HTTP %d %q, want what /mcp/nothing-here answers: HTTP %d %q", r.method, r.path, who, got.Status, got.Body, nothing.Status, nothing.Body)
			}
		}
		// Beside it, and anywhere else: the challenge does not tell in
		// which folder a restricted endpoint lives.
		for _, elsewhere := range []string{"/mcp/nothing-here", "/teams/nothing-here", "/nothing-here"} {
			anon, anonNothing := send(r, ""), send(req{r.method, elsewhere, r.body}, "")
			if anon.Status != http.StatusUnauthorized || anonNothing.Status != anon.Status || anon.Header.Get("WWW-Authenticate") != anonNothing.Header.Get("WWW-Authenticate") {
				t.Errorf("%s %s without a token: HTTP %d %q; at %s: HTTP %d %q", r.method, r.path, anon.Status, anon.Header.Get("WWW-Authenticate"), elsewhere, anonNothing.Status, anonNothing.Header.Get("WWW-Authenticate"))
			}
		}
	}
	if r := send(reqs[0], f.dev); r.Status != http.StatusOK || r.Error != nil {
		t.Errorf("/mcp/dev as dev: HTTP %d %s", r.Status, r.Body)
	}
	if r := send(reqs[0], f.ops); strings.Contains(string(r.Body), "dev") {
		t.Errorf("the refusal names the endpoint: %s", r.Body)
	}
}

// A merged page's cursor continues the listing of the view that handed it
// out, and no other: at another endpoint, or at /mcp, it is an invalid
// cursor, and /mcp's is invalid at an endpoint.
func TestEndpointCursorNeverCrossesViews(t *testing.T) {
	f := newEndpointsFixture(t, "")
	first := func(url string) string {
		var page listResult
		post(t, url, as(f.both)("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &page)
		if page.NextCursor == "" {
			t.Fatalf("%s: one page only", url)
		}
		return page.NextCursor
	}
	devCursor, mainCursor := first(f.base+"/mcp/dev"), first(f.p.URL)
	for _, c := range []struct{ url, cursor, what string }{
		{f.base + "/mcp/ops", devCursor, "/mcp/dev's cursor at /mcp/ops"},
		{f.p.URL, devCursor, "/mcp/dev's cursor at /mcp"},
		{f.base + "/mcp/dev", mainCursor, "/mcp's cursor at /mcp/dev"},
	} {
		r := post(t, c.url, as(f.both)("resources/list", ""), rpcBody(2, "resources/list", fmt.Sprintf(`"cursor":%q`, c.cursor)))
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "invalid cursor") {
			t.Errorf("%s: HTTP %d %s", c.what, r.Status, r.Body)
		}
	}
	var page listResult
	post(t, f.base+"/mcp/dev", as(f.both)("resources/list", ""), rpcBody(3, "resources/list", fmt.Sprintf(`"cursor":%q`, devCursor))).result(t, &page)
	for _, r := range page.Resources {
		if u := r["uri"].(string); strings.HasPrefix(u, "github+") || strings.HasSuffix(u, "/secret") {
			t.Errorf("/mcp/dev's second page holds %s", u)
		}
	}
}

// Subscriptions see the view: a URI outside it is not honoured (as one
// nobody serves) and never watched, and an upstream's list changes reach
// only the listeners of endpoints that hold it.
func TestEndpointSubscriptions(t *testing.T) {
	f := newEndpointsFixture(t, "")
	filter := `{"toolsListChanged":true,"resourceSubscriptions":["docs+test://docs/0","docs+test://docs/secret","github+test://github/0"]}`
	dev := listen(t, f.base+"/mcp/dev", 1, filter, "Authorization", "Bearer "+f.dev)
	ack := fmt.Sprint(dev.next(t, 5*time.Second)["params"])
	if !strings.Contains(ack, "docs+test://docs/0") || strings.Contains(ack, "secret") || strings.Contains(ack, "github+") {
		t.Errorf("/mcp/dev acknowledged %s", ack)
	}
	ops := listen(t, f.base+"/mcp/ops", 2, `{"toolsListChanged":true}`, "Authorization", "Bearer "+f.ops)
	ops.next(t, 5*time.Second)
	main := listen(t, f.p.URL, 3, `{"toolsListChanged":true}`, "Authorization", "Bearer "+f.ops)
	main.next(t, 5*time.Second)
	// docs is /mcp/dev's and /mcp's, not /mcp/ops's.
	f.docs.AddTool(&mcp.Tool{Name: "fresh", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("fresh"), nil
	})
	dev.expect(t, 1, "notifications/tools/list_changed", "")
	main.expect(t, 3, "notifications/tools/list_changed", "")
	ops.quiet(t, time.Second, "a docs tools change at /mcp/ops, which does not serve docs")
	updateUpstream(t, f.docs, "test://docs/0")
	dev.expect(t, 1, "notifications/resources/updated", "docs+test://docs/0")
	// vault is /mcp/ops's: its change is told there.
	f.vault.AddTool(&mcp.Tool{Name: "fresh", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("fresh"), nil
	})
	ops.expect(t, 2, "notifications/tools/list_changed", "")

	// A legacy session at /mcp/dev (the go-sdk client in 2025-11-25):
	// resources/subscribe of a URI outside the view is accepted, as the
	// legacy protocol has it, and never told of.
	updated := make(chan string, 16)
	cs := sdkClientWith(t, f.base+"/mcp/dev", "2025-11-25", f.dev, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	for _, uri := range []string{"docs+test://docs/secret", "docs+test://docs/1"} {
		if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatalf("subscribe %s: %v", uri, err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		updateUpstream(t, f.docs, "test://docs/secret")
		updateUpstream(t, f.docs, "test://docs/1")
		select {
		case uri := <-updated:
			if uri != "docs+test://docs/1" {
				t.Fatalf("the legacy session was told of %s", uri)
			}
			return nil
		case <-time.After(200 * time.Millisecond):
			return fmt.Errorf("no update yet")
		}
	})
}

// Both eras and every frontend serve the view: the go-sdk client in the
// 2026-07-28 era and in 2025-11-25 (a session, which belongs to the
// endpoint it was opened on), the 2024-11-05 HTTP+SSE transport at
// /mcp/dev/sse and /mcp/dev/messages, and manifold stdio --endpoint.
func TestEndpointInEveryEraAndFrontend(t *testing.T) {
	f := newEndpointsFixture(t, "")
	dev := f.base + "/mcp/dev"
	want := sorted("docs_echo", "docs_link", "docs_ask", "docs_region", "github_echo", "github_progress",
		"local_echo", "local_progress", "local_link", "local_ask", "local_region")
	for _, version := range []string{"", "2025-11-25"} {
		cs := sdkClientWith(t, dev, version, f.dev)
		var got []string
		for tool, err := range cs.Tools(context.Background(), nil) {
			if err != nil {
				t.Fatalf("era %q: %v", version, err)
			}
			got = append(got, tool.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the go-sdk client (era %q) at /mcp/dev lists\n %v\nwant %v", version, got, want)
		}
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "docs_wait"})
		if err == nil && !res.IsError {
			t.Errorf("era %q: docs_wait was called: %+v", version, res)
		}
		if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "docs+test://shared"}); err == nil {
			t.Errorf("era %q: read a resource outside the view", version)
		}
	}
	// A session opened at /mcp/dev is unknown at /mcp, and /mcp's at /mcp/dev.
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + f.both}}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	for _, c := range []struct{ open, use string }{{dev, f.p.URL}, {f.p.URL, dev}, {dev, f.base + "/mcp/ops"}} {
		r := post(t, c.open, h, init)
		hs := h.Clone()
		hs.Set("Mcp-Session-Id", r.Header.Get("Mcp-Session-Id"))
		hs.Set("MCP-Protocol-Version", "2025-11-25")
		post(t, c.use, hs, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`).wantError(t, http.StatusNotFound, -32600)
		if r := post(t, c.open, hs, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); r.Error != nil {
			t.Errorf("the session where it was opened: %s", r.Body)
		}
	}
	// The HTTP+SSE transport of the endpoint.
	bearer := http.Header{"Authorization": {"Bearer " + f.dev}}
	c := openSSE(t, dev, bearer)
	if c.endpoint.Path != "/mcp/dev/messages" {
		t.Errorf("the endpoint event names %s", c.endpoint)
	}
	c.postTo(t, f.base, bearer.Clone(), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	c.message(t)
	c.postTo(t, f.base, bearer.Clone(), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	var names []string
	params := "{}"
	for id := 2; id < 20; id++ {
		c.postTo(t, f.base, bearer.Clone(), fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":%s}`, id, params))
		res := c.message(t)["result"].(map[string]any)
		for _, tool := range res["tools"].([]any) {
			names = append(names, tool.(map[string]any)["name"].(string))
		}
		next, _ := res["nextCursor"].(string)
		if next == "" {
			break
		}
		params = fmt.Sprintf(`{"cursor":%q}`, next)
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("HTTP+SSE at /mcp/dev lists %v", names)
	}
}

// sdkClientWith is sdkClient with a bearer token on every request, and
// options (if any).
func sdkClientWith(t testing.TB, url, version, tok string, o ...*mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	var opts0 *mcp.ClientOptions
	if len(o) > 0 {
		opts0 = o[0]
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "sdk-test-client", Version: "1.0.0"}, opts0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{tok}}}
	cs, err := c.Connect(ctx, tr, opts)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// manifold stdio --endpoint PATH serves that endpoint's view to a stdio
// host, in both eras; an endpoint with access rules admits no stdio
// caller, and a path that is no endpoint is refused before anything
// starts.
func TestStdioEndpoint(t *testing.T) {
	docs := modernSDK(t, sdkToolServer("docs", sdkOptions{resources: 2}))
	github := serveHTTP(t, mcpgoToolServer("github", false))
	conf := "upstreams:" + httpUpstreamYAML("docs", docs.URL) + httpUpstreamYAML("github", github.URL) + `
endpoints:
  - path: /mcp/gh
    upstreams: [github]
    tools: {deny: [github_wait]}
`
	s := startStdio(t, conf, "--endpoint", "/mcp/gh")
	var page listResult
	s.ask(t, 1, rpcBody(1, "tools/list", "")).result(t, &page)
	if got := ids([]listResult{page}, "tools"); !slices.Equal(got, []string{"github_echo", "github_progress"}) {
		t.Errorf("stdio --endpoint /mcp/gh lists %v", got)
	}
	if r := s.ask(t, 2, rpcBody(2, "tools/call", `"name":"docs_echo","arguments":{"text":"x"}`)); r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("docs_echo through /mcp/gh: %s", r.Body)
	}
	s.ask(t, 3, `{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	r := s.ask(t, 4, `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`)
	if strings.Contains(string(r.Body), "docs_") || !strings.Contains(string(r.Body), "github_echo") {
		t.Errorf("a legacy session of stdio --endpoint /mcp/gh lists %s", r.Body)
	}
	restricted := strings.Replace(unusedIssuer+conf, "tools: {deny: [github_wait]}", "access: [{claim: groups, values: [dev]}]", 1)
	for _, c := range []struct{ conf, at, want string }{
		{conf, "/mcp/nosuch", "--endpoint /mcp/nosuch is not a configured endpoint (these are: /mcp/gh)"},
		{restricted, "/mcp/gh", "the endpoint admits only the principals its access rules name, and a stdio caller has none"},
	} {
		_, stderr, code := runCLI(t, t.TempDir(), "stdio", "--config", writeConfig(t, c.conf), "--endpoint", c.at)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("stdio --endpoint %s: exit %d, stderr %q", c.at, code, stderr)
		}
	}
}

// unusedIssuer is an auth section naming an issuer that is never asked
// (the configuration only has to validate).
const unusedIssuer = "auth:\n  jwt: {issuer: \"https://idp.example.com\", audiences: [m], jwks_url: \"https://idp.example.com/jwks\"}\n"

// A view's globs are of the names as the endpoint lists them: without
// namespaces, an endpoint of the second of two upstreams that both list
// echo routes echo to its own upstream, though the first owns the name at
// /mcp; and the first upstream's ownership, learnt at /mcp, hides nothing
// in the view.
func TestEndpointOwnershipWithoutNamespaces(t *testing.T) {
	one, two := modernSDK(t, sdkToolServer("one", sdkOptions{})), modernSDK(t, sdkToolServer("two", sdkOptions{}))
	p := startProxy(t, "namespace: none\nupstreams:"+httpUpstreamYAML("one", one.URL)+httpUpstreamYAML("two", two.URL)+`
endpoints:
  - path: /mcp/two
    upstreams: [two]
    tools: {allow: [echo, link]}
`)
	if text := toolText(t, p.URL, "echo", `{"text":"x"}`); text != "one: x" {
		t.Errorf("echo at /mcp: %q", text)
	}
	two2 := origin(p) + "/mcp/two"
	if text := toolText(t, two2, "echo", `{"text":"x"}`); text != "two: x" {
		t.Errorf("echo at /mcp/two: %q", text)
	}
	if got := ids(listAllAs(t, two2, "tools/list", ""), "tools"); !slices.Equal(got, []string{"echo", "link"}) {
		t.Errorf("tools at /mcp/two: %v", got)
	}
	var rr readResult
	post(t, two2, headers("resources/read", "test://shared"), rpcBody(1, "resources/read", `"uri":"test://shared"`)).result(t, &rr)
	if len(rr.Contents) != 1 || rr.Contents[0].Text != "shared from two" {
		t.Errorf("test://shared at /mcp/two: %+v", rr)
	}
}

// Metrics and the audit log name the endpoint a request came to; /metrics
// on the main listener names to each caller only the endpoints it may
// use, and /ui/state shows each endpoint's view to those who may use it
// (its access rules to an operator).
func TestEndpointInMetricsAuditAndUI(t *testing.T) {
	auditFile := t.TempDir() + "/audit.log"
	f := newEndpointsFixture(t, fmt.Sprintf("audit: {file: %q}\nadmin: {operators: [{claim: groups, values: [root]}]}\n", auditFile))
	toolTextAs(t, f.base+"/mcp/dev", f.dev, "docs_echo")
	toolTextAs(t, f.p.URL, f.dev, "docs_echo")
	// Refused before the router (no token): its record names the endpoint too.
	if r := post(t, f.base+"/mcp/dev", headers("tools/call", "docs_echo"), rpcBody(1, "tools/call", `"name":"docs_echo","arguments":{}`)); r.Status != http.StatusUnauthorized {
		t.Fatalf("no token at /mcp/dev: HTTP %d", r.Status)
	}
	scrape := func(tok string) string {
		_, body := fetch(t, http.MethodGet, f.base+"/metrics", bearerHeader(tok))
		return body
	}
	m := scrape(f.dev)
	if !strings.Contains(m, `manifold_requests_total{code="ok",endpoint="/mcp/dev",method="tools/call"} 1`) ||
		!strings.Contains(m, `manifold_requests_total{code="ok",endpoint="/mcp",method="tools/call"} 1`) {
		t.Errorf("metrics as dev:\n%s", grepLines(m, "manifold_requests_total"))
	}
	if strings.Contains(m, "/mcp/ops") {
		t.Errorf("metrics as dev name /mcp/ops")
	}
	if m := scrape(f.ops); strings.Contains(m, "/mcp/dev") || !strings.Contains(m, `endpoint="/mcp/ops"`) {
		t.Errorf("metrics as ops:\n%s", grepLines(m, "endpoint="))
	}
	_, lines := readAudit(t, auditFile, 3)
	var at []string
	for _, l := range lines {
		if l.Method == "tools/call" {
			at = append(at, l.Endpoint+" "+l.Outcome)
		}
	}
	if !slices.Equal(sorted(at...), []string{"/mcp ok", "/mcp/dev http-401", "/mcp/dev ok"}) {
		t.Errorf("audit endpoints of the calls: %v", at)
	}
	state := func(tok string) (out struct {
		Endpoints []struct {
			Path       string
			Upstreams  []string
			Tools      struct{ Allow, Deny []string }
			Restricted bool
			Access     []struct{ Claim string }
		}
	}) {
		_, body := fetch(t, http.MethodGet, f.base+"/ui/state", bearerHeader(tok))
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("/ui/state: %v %s", err, body)
		}
		return out
	}
	dev := state(f.dev)
	if len(dev.Endpoints) != 1 || dev.Endpoints[0].Path != "/mcp/dev" || !slices.Equal(dev.Endpoints[0].Upstreams, []string{"docs", "github", "local"}) ||
		!slices.Equal(dev.Endpoints[0].Tools.Deny, []string{"*_wait"}) || !dev.Endpoints[0].Restricted || dev.Endpoints[0].Access != nil {
		t.Errorf("/ui/state as dev: %+v", dev.Endpoints)
	}
	root := state(f.is.mint("rsa-1", claims{"sub": "ray", "groups": []string{"root"}}))
	if len(root.Endpoints) != 2 || !slices.Equal(root.Endpoints[0].Upstreams, []string{"docs", "github", "vault", "local"}) || len(root.Endpoints[1].Access) != 1 {
		t.Errorf("/ui/state as an operator: %+v", root.Endpoints)
	}
}

// rawDo sends one request and reads the answer whole, JSON or not.
func rawDo(t testing.TB, method, url string, h http.Header, body string) *rawResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := &rawResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if resp.Header.Get("Content-Type") == "application/json" {
		_ = json.Unmarshal(b, r)
	}
	return r
}

// The admin page in a real browser shows each endpoint's view: its path,
// upstreams, globs and who may use it; without endpoints, no table.
func TestEndpointsOnAdminPage(t *testing.T) {
	chromium := findChromium(t)
	docs := modernSDK(t, sdkToolServer("docs", sdkOptions{resources: 1}))
	o := startOps(t, unusedIssuer+"upstreams:"+httpUpstreamYAML("docs", docs.URL)+httpUpstreamYAML("wiki", docs.URL)+`
endpoints:
  - path: /mcp/dev
    upstreams: [docs]
    tools: {allow: ["docs_*"], deny: ["*_wait"]}
  - path: /mcp/ops
    access: [{claim: groups, values: [ops]}]
`)
	ctx := browser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 720), chromedp.Navigate(o.Admin+"/ui"),
		chromedp.WaitVisible(`tr[data-endpoint="/mcp/ops"]`)); err != nil {
		t.Fatalf("load /ui in chromium: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]map[string]string](`(() => {
  const out = {};
  for (const tr of document.querySelectorAll("tr[data-endpoint]")) {
    const c = (cls) => tr.querySelector("td." + cls).innerText.trim();
    out[tr.dataset.endpoint] = {upstreams: c("upstreams"), tools: c("tools"), prompts: c("prompts"), access: c("access")};
  }
  return out;
})()`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"/mcp/dev": {"upstreams": "docs", "tools": "docs_* except *_wait", "prompts": "all", "access": "everyone"},
		"/mcp/ops": {"upstreams": "docs, wiki", "tools": "all", "prompts": "all", "access": "groups: ops"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("the page shows\n %v\nwant %v", rows, want)
	}
}

// Without namespaces, the upstream first in the configuration that lists
// a URI answers its reads. A caller who cannot see that upstream (an
// endpoint without it) is answered by the next that has the URI, and that
// changes nothing for the others: the route is shared by every caller, so
// a restricted caller's read must not move it.
func TestRestrictedReadMovesNoRoute(t *testing.T) {
	server := func(name string) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		s.AddResource(&mcp.Resource{URI: "file:///shared", Name: "shared"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "file:///shared", Text: "from " + name}}}, nil
		})
		return s
	}
	a, b := serveHTTP(t, modernHandler(server("a"))), serveHTTP(t, modernHandler(server("b")))
	p := startProxy(t, "namespace: none\ncache: {memory: {max_bytes: 0}}\nupstreams:"+httpUpstreamYAML("a", a.URL)+httpUpstreamYAML("b", b.URL)+`
endpoints:
  - path: /mcp/b
    upstreams: [b]
`)
	listAllAs(t, p.URL, "resources/list", "")
	if got := readText(t, p.URL, "file:///shared"); got != "from a" {
		t.Fatalf("read at /mcp: %q, want a's, first in the configuration", got)
	}
	if got := readText(t, origin(p)+"/mcp/b", "file:///shared"); got != "from b" {
		t.Fatalf("read at /mcp/b: %q, want b's, the only one it holds", got)
	}
	if got := readText(t, p.URL, "file:///shared"); got != "from a" {
		t.Errorf("read at /mcp after /mcp/b's: %q, want a's still", got)
	}
}
