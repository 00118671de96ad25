package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sdkClient connects a go-sdk client to url, in the modern era unless
// version names a legacy one.
func sdkClient(t testing.TB, url, version string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "sdk-test-client", Version: "1.0.0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, opts)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// directURIs lists every resource of an upstream with its own client: the
// reference Manifold's merged list is checked against.
func directURIs(t testing.TB, url, version string) []string {
	t.Helper()
	cs := sdkClient(t, url, version)
	var out []string
	for r, err := range cs.Resources(context.Background(), nil) {
		if err != nil {
			t.Fatalf("direct list of %s: %v", url, err)
		}
		out = append(out, r.URI)
	}
	return out
}

func prefixed(name string, uris []string) []string {
	out := make([]string, len(uris))
	for i, u := range uris {
		out[i] = name + "+" + u
	}
	return out
}

// Three upstreams of three kinds (modern go-sdk over HTTP, legacy mcp-go over
// HTTP, go-sdk over stdio) merge into one list, in configuration order, with
// URIs namespaced and every other field intact; reads route by prefix.
func TestThreeKindsMerged(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 2, ttlMs: 60_000, scope: "public"}))
	beta := mcpgoLegacy(t, "beta", 2)
	p := startProxy(t, "upstreams:"+
		httpUpstreamYAML("alpha", alpha.URL)+
		httpUpstreamYAML("beta", beta.URL)+
		childUpstream("gamma", "sdk:gamma"))

	pages := listAll(t, p.URL, "resources/list")
	got := uris(pages)

	// The reference: each upstream listed directly by an independent client,
	// prefixed, concatenated in configuration order. The stdio child is
	// listed through the proxy's view of it only, so its part is checked
	// against the fixture's definition.
	want := prefixed("alpha", directURIs(t, alpha.URL, ""))
	want = append(want, prefixed("beta", directURIs(t, beta.URL, "2025-11-25"))...)
	gamma := []string{"test://gamma/0", "test://gamma/1", "test://gamma/2", "test://gamma/pid", "test://gamma/secret", "test://gamma/tick", "test://shared"}
	var gotGamma []string
	for _, u := range got {
		if strings.HasPrefix(u, "gamma+") {
			gotGamma = append(gotGamma, strings.TrimPrefix(u, "gamma+"))
		}
	}
	slices.Sort(gotGamma)
	if !slices.Equal(gotGamma, gamma) {
		t.Errorf("gamma part of the list = %v, want %v", gotGamma, gamma)
	}
	if !slices.Equal(got[:len(want)], want) {
		t.Errorf("merged list starts\n  %v\nwant\n  %v", got[:len(want)], want)
	}

	// Everything but the URI passes through: name, title, annotations,
	// icons, _meta.
	var item map[string]any
	for _, r := range pages[0].Resources {
		if r["uri"] == "alpha+test://alpha/0" {
			item = r
		}
	}
	if item == nil {
		t.Fatal("alpha+test://alpha/0 not listed")
	}
	b, _ := json.Marshal(item)
	for _, want := range []string{`"name":"alpha-0"`, `"title":"Resource alpha resource 0"`, `"priority":0.5`, `"audience":["user"]`, `"src":"https://example.com/alpha.png"`, `"example.com/origin":"alpha"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("listed item %s lacks %s", b, want)
		}
	}
	// A legacy upstream sends no hints, so the merged page is stale at once.
	if pages[0].TTLms == nil || *pages[0].TTLms != 0 || pages[0].CacheScope != "private" || pages[0].ResultType != "complete" {
		t.Errorf("merged page hints: ttlMs=%v cacheScope=%q resultType=%q", pages[0].TTLms, pages[0].CacheScope, pages[0].ResultType)
	}

	// Reads route by prefix to the right upstream, whatever its kind.
	for _, c := range []struct{ uri, text string }{
		{"alpha+test://alpha/1", "alpha resource 1"},
		{"beta+test://beta/0", "beta resource 0"},
		{"gamma+test://gamma/2", "gamma resource 2"},
		{"alpha+test://shared", "shared from alpha"},
		{"beta+test://shared", "shared from beta"},
		{"gamma+test://shared", "shared from gamma"},
	} {
		var rr readResult
		post(t, p.URL, headers("resources/read", c.uri), rpcBody(7, "resources/read", fmt.Sprintf(`"uri":%q`, c.uri))).result(t, &rr)
		if len(rr.Contents) != 1 || rr.Contents[0].Text != c.text || rr.Contents[0].URI != c.uri {
			t.Errorf("read %s = %+v, want text %q at the namespaced URI", c.uri, rr.Contents, c.text)
		}
		if rr.ResultType != "complete" || rr.TTLms == nil || rr.CacheScope == "" {
			t.Errorf("read %s: resultType=%q ttlMs=%v cacheScope=%q", c.uri, rr.ResultType, rr.TTLms, rr.CacheScope)
		}
		if info, _ := rr.Meta["io.modelcontextprotocol/serverInfo"].(map[string]any); info["name"] != "manifold" {
			t.Errorf("read %s: _meta serverInfo = %v", c.uri, rr.Meta)
		}
	}
}

// A go-sdk client, an independent implementation of the 2026-07-28 client,
// talks to Manifold as to any MCP server.
func TestGoSDKClientThroughProxy(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 3}))
	beta := legacySDK(t, newSDKServer("beta", sdkOptions{resources: 2}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", alpha.URL)+httpUpstreamYAML("beta", beta.URL))
	cs := sdkClient(t, p.URL, "")
	ctx := context.Background()

	var listed []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, r.URI)
	}
	want := append(prefixed("alpha", directURIs(t, alpha.URL, "")), prefixed("beta", directURIs(t, beta.URL, "2025-11-25"))...)
	if !slices.Equal(listed, want) {
		t.Errorf("go-sdk client lists %v, want %v", listed, want)
	}

	var templates []string
	for tm, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, tm.URITemplate)
	}
	if !slices.Equal(templates, []string{"alpha+test://alpha/items/{id}", "beta+test://beta/items/{id}"}) {
		t.Errorf("templates = %v", templates)
	}

	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "beta+test://beta/items/42"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Contents[0].Text != "beta item 42" || res.Contents[0].URI != "beta+test://beta/items/42" {
		t.Errorf("template read = %+v", res.Contents[0])
	}

	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "alpha+test://alpha/items/missing"})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(string(werr.Data), `"uri":"alpha+test://alpha/items/missing"`) {
		t.Errorf("not-found read error = %v (%#v)", err, werr)
	}
}

// Templates merge like resources: each template is namespaced and remains
// a valid RFC 6570 template that matches the namespaced URIs it reads.
func TestTemplatesMergedAndRouted(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{}))
	gamma := childUpstream("gamma", "sdk:gamma")
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", alpha.URL)+gamma)
	pages := listAll(t, p.URL, "resources/templates/list")
	var got []string
	for _, pg := range pages {
		for _, tm := range pg.ResourceTemplates {
			got = append(got, tm["uriTemplate"].(string))
			if tm["name"] == nil {
				t.Errorf("template %v lost its name", tm)
			}
		}
	}
	if !slices.Equal(got, []string{"alpha+test://alpha/items/{id}", "gamma+test://gamma/items/{id}", "gamma+test://gamma/progress/{x}"}) {
		t.Fatalf("templates = %v", got)
	}
	for _, c := range []struct{ uri, text string }{
		{"alpha+test://alpha/items/7", "alpha item 7"},
		{"gamma+test://gamma/items/x", "gamma item x"},
	} {
		var rr readResult
		post(t, p.URL, headers("resources/read", c.uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, c.uri))).result(t, &rr)
		if rr.Contents[0].Text != c.text || rr.Contents[0].URI != c.uri {
			t.Errorf("read %s = %+v", c.uri, rr.Contents)
		}
	}
}

// Not-found from every kind of upstream reaches the client as -32602 with
// the namespaced URI in data.uri: from a legacy -32002 (mcp-go over HTTP, and
// a go-sdk stdio child configured the old way) and from a modern -32602.
func TestNotFoundMapping(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{}))
	beta := mcpgoLegacy(t, "beta", 1)
	p := startProxy(t, "upstreams:"+
		httpUpstreamYAML("alpha", alpha.URL)+
		httpUpstreamYAML("beta", beta.URL)+
		childUpstream("gamma", "sdk-legacy-notfound:gamma"))

	// First confirm the fixtures really answer -32002: the test would prove
	// nothing if they did not.
	raw := post(t, beta.URL, http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}},
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := raw.Header.Get("Mcp-Session-Id")
	raw = post(t, beta.URL, http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}},
		`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"test://beta/nope"}}`)
	if raw.Error == nil || raw.Error.Code != -32002 {
		t.Fatalf("fixture mcp-go does not answer -32002: %s", raw.Body)
	}

	for _, uri := range []string{
		"alpha+test://alpha/items/missing", // modern -32602 from a handler
		"alpha+test://nope",                // modern -32602 from the SDK itself
		"beta+test://beta/nope",            // legacy -32002 over HTTP
		"gamma+test://gamma/items/missing", // legacy -32002 over stdio
		"nosuch+test://x",                  // an upstream that does not exist
		"test://no-prefix",                 // no upstream prefix at all
	} {
		r := post(t, p.URL, headers("resources/read", uri), rpcBody(9, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
		r.wantError(t, http.StatusBadRequest, -32602)
		var data struct {
			URI string `json:"uri"`
		}
		if err := json.Unmarshal(r.Error.Data, &data); err != nil || data.URI != uri {
			t.Errorf("read %s: data = %s, want uri %q", uri, r.Error.Data, uri)
		}
		if string(r.ID) != "9" {
			t.Errorf("read %s: id = %s", uri, r.ID)
		}
	}
}

// Read routing by prefix reaches only the named upstream.
func TestReadRoutesToOneUpstream(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 1}))
	beta := modernSDK(t, newSDKServer("beta", sdkOptions{resources: 1}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", alpha.URL)+httpUpstreamYAML("beta", beta.URL))
	for i := 0; i < 3; i++ {
		var rr readResult
		post(t, p.URL, headers("resources/read", "beta+test://beta/0"), rpcBody(i, "resources/read", `"uri":"beta+test://beta/0"`)).result(t, &rr)
	}
	if a, b := alpha.Calls.get("resources/read"), beta.Calls.get("resources/read"); a != 0 || b != 3 {
		t.Errorf("reads reached alpha %d times and beta %d times, want 0 and 3", a, b)
	}
}
