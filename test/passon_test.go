package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/redistest"
)

// What the cache and the views pass on (issue #36): what an upstream
// answers reaches callers and the cache only when it is an answer
// Manifold may give.

// rawReads is a modern upstream whose reads answer the results given, by
// URI (each a public answer for a minute unless it says otherwise).
func rawReads(t testing.TB, results map[string]string) *httpUpstream {
	return serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, _ := jsonrpc.Member(body, "id")
		w.Header().Set("Content-Type", "application/json")
		var res string
		switch r.Header.Get("Mcp-Method") {
		case "server/discover":
			res = `{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"resources":{}}}`
		case "resources/read":
			res = results[r.Header.Get("Mcp-Name")]
		}
		if res == "" {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, id)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, res)
	}))
}

// A read whose answer is malformed (a blob that is not base64, no contents
// at all) is -32603 naming the upstream, and nothing is kept: the next read,
// on this replica or another sharing Redis, asks the upstream again, the
// repeated read's replay from memory included. An empty contents array is
// a resource without content, cached as any answer, and so is a blob in
// base64 (the control: the test would see an entry kept).
func TestMalformedReadIsNotPassedOn(t *testing.T) {
	const hints = `"ttlMs":60000,"cacheScope":"public","resultType":"complete"`
	results := map[string]string{
		"test://badblob":      `{"contents":[{"uri":"test://badblob","mimeType":"image/png","blob":"not base64!"}],` + hints + `}`,
		"test://badblob2":     `{"contents":[{"uri":"test://badblob2","text":"fine"},{"uri":"test://badblob2/b","blob":"aGVsbG8"}],` + hints + `}`,
		"test://nocontents":   `{` + hints + `}`,
		"test://nullcontents": `{"contents":null,` + hints + `}`,
		"test://empty":        `{"contents":[],` + hints + `}`,
		"test://blob":         `{"contents":[{"uri":"test://blob","blob":"aGV\/bG8="}],` + hints + `}`,
	}
	malformed := []string{"test://badblob", "test://badblob2", "test://nocontents", "test://nullcontents"}
	read := func(p *proxy, uri string) *rawResponse {
		return post(t, p.URL, headers("resources/read", "u+"+uri), rpcBody(7, "resources/read", fmt.Sprintf(`"uri":"u+%s"`, uri)))
	}
	wantMalformed := func(t *testing.T, r *rawResponse, uri string) {
		t.Helper()
		if r.Status != 200 || r.Error == nil || r.Error.Code != -32603 ||
			!strings.Contains(r.Error.Message, "upstream u ") || strings.Contains(string(r.Body), "not base64!") {
			t.Errorf("read of %s: want HTTP 200, -32603 naming upstream u without its answer, got HTTP %d: %s", uri, r.Status, r.Body)
		}
	}
	check := func(t *testing.T, first, second *proxy, up *httpUpstream) {
		for _, uri := range malformed {
			wantMalformed(t, read(first, uri), uri)
			wantMalformed(t, read(first, uri), uri)
			wantMalformed(t, read(second, uri), uri)
			if n := up.Calls.get("resources/read " + uri); n != 3 {
				t.Errorf("%s: %d upstream reads for 3 reads, want 3: the malformed answer was kept", uri, n)
			}
		}
		for _, uri := range []string{"test://empty", "test://blob"} {
			for _, p := range []*proxy{first, first, second} {
				var rr readResult
				read(p, uri).result(t, &rr)
			}
			if n := up.Calls.get("resources/read " + uri); n != 1 {
				t.Errorf("%s: %d upstream reads for 3 reads, want 1: a valid answer was not kept", uri, n)
			}
		}
	}
	t.Run("memory", func(t *testing.T) {
		up := rawReads(t, results)
		p := startProxy(t, "upstreams:"+httpUpstreamYAML("u", up.URL))
		check(t, p, p, up)
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		up := rawReads(t, results)
		shared := fmt.Sprintf("cache: {secret: passon-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL())
		a := startProxy(t, shared+httpUpstreamYAML("u", up.URL))
		b := startProxy(t, shared+httpUpstreamYAML("u", up.URL))
		check(t, a, b, up)
	})
	t.Run("uncached", func(t *testing.T) {
		up := rawReads(t, results)
		p := startProxy(t, "cache: {memory: {max_bytes: 0}}\nupstreams:"+httpUpstreamYAML("u", up.URL))
		for _, uri := range malformed {
			wantMalformed(t, read(p, uri), uri)
		}
	})
}

// erringUpstream is a modern upstream whose tools answer as their names
// say: "code0" a JSON-RPC error of code 0 whose message holds a secret,
// "reserved" one of code -32500 (inside the range JSON-RPC reserves, and
// defined by no one), "app" an application's own code 42, "mcp" MCP's
// -32042 of 2025-11-25, "boom" an HTTP 500 whose body names an internal
// host; a read answers the HTTP 500 too.
func erringUpstream(t testing.TB) *httpUpstream {
	return serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, _ := jsonrpc.Member(body, "id")
		w.Header().Set("Content-Type", "application/json")
		fail := func(code int, msg string) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%q}}`, id, code, msg)
		}
		switch name := r.Header.Get("Mcp-Name"); {
		case r.Header.Get("Mcp-Method") == "server/discover":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"resources":{},"tools":{}}}}`, id)
		case name == "code0":
			fail(0, "password=hunter2 host=db-primary.internal")
		case name == "reserved":
			fail(-32500, "password=hunter2 host=db-primary.internal")
		case name == "app":
			fail(42, "quota exceeded for project p")
		case name == "mcp":
			fail(-32042, "open https://example.com/connect first")
		case name == "busy":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"busy","data":{"retryAfterMs":60000}}}`, id)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "dial tcp db-primary.internal:5432: connection refused (password=hunter2)")
		}
	}))
}

// erringLegacyUpstream is a 2025-11-25 server that makes a session, then
// answers every request with an HTTP 500 whose body names a secret and a
// host.
func erringLegacyUpstream(t testing.TB) *httpUpstream {
	return serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, _ := jsonrpc.Member(body, "id")
		method, _ := jsonrpc.MemberString(body, "method")
		switch {
		case method == "initialize":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Mcp-Session-Id", "s-1")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"resources":{},"tools":{}},"serverInfo":{"name":"old","version":"1"}}}`, id)
		case strings.HasPrefix(method, "notifications/"):
			w.WriteHeader(http.StatusAccepted)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "dial tcp db-primary.internal:5432: connection refused (password=hunter2)")
		}
	}))
}

// An upstream's JSON-RPC error is its answer and passes on, its text
// included, when its code is one JSON-RPC allows; an invalid code (0, or
// one in the reserved range that nothing defines) becomes -32603 saying
// so, its message in the log alone. A failure to get an answer (an HTTP
// 500 and its body, a dial error and the address it names) is told as
// "upstream X unavailable", with the status when there is one; the detail
// is in the log, at the level operators read.
func TestUpstreamErrorsTellNoSecrets(t *testing.T) {
	up := erringUpstream(t)
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("u", up.URL)+httpUpstreamYAML("gone", "http://"+closed+"/mcp"))
	secretFree := func(what string, r *rawResponse, want string) {
		t.Helper()
		if r.Status != 200 || r.Error == nil || r.Error.Code != -32603 || !strings.Contains(r.Error.Message, want) {
			t.Errorf("%s: want HTTP 200, -32603 saying %q, got HTTP %d: %s", what, want, r.Status, r.Body)
		}
		for _, secret := range []string{"hunter2", "db-primary", closed} {
			if strings.Contains(string(r.Body), secret) {
				t.Errorf("%s: the caller was told %q: %s", what, secret, r.Body)
			}
		}
	}
	secretFree("code 0", callTool(t, p.URL, "u_code0", `{}`), "upstream u answered an invalid error (code 0)")
	secretFree("code -32500", callTool(t, p.URL, "u_reserved", `{}`), "upstream u answered an invalid error (code -32500)")
	secretFree("HTTP 500 to a call", callTool(t, p.URL, "u_boom", `{}`), "upstream u unavailable (HTTP 500)")
	secretFree("HTTP 500 to a read", post(t, p.URL, headers("resources/read", "u+test://x"), rpcBody(1, "resources/read", `"uri":"u+test://x"`)), "upstream u unavailable (HTTP 500)")
	secretFree("dial error", callTool(t, p.URL, "gone_x", `{}`), "upstream gone unavailable")
	secretFree("dial error to a read", post(t, p.URL, headers("resources/read", "gone+test://x"), rpcBody(1, "resources/read", `"uri":"gone+test://x"`)), "upstream gone unavailable")
	// A legacy server (2025-11-25, a session) that fails the same way once
	// its session is made is told the same.
	lp := startProxy(t, "upstreams:"+httpUpstreamYAML("old", erringLegacyUpstream(t).URL, "protocol: 2025-11-25"))
	secretFree("HTTP 500 from a legacy server to a call", callTool(t, lp.URL, "old_boom", `{}`), "upstream old unavailable (HTTP 500)")
	secretFree("HTTP 500 from a legacy server to a read", post(t, lp.URL, headers("resources/read", "old+test://x"), rpcBody(1, "resources/read", `"uri":"old+test://x"`)), "upstream old unavailable (HTTP 500)")

	if r := callTool(t, p.URL, "u_app", `{}`); r.Error == nil || r.Error.Code != 42 || r.Error.Message != "quota exceeded for project p" {
		t.Errorf("an application's own error did not pass as it came: %s", r.Body)
	}
	if r := callTool(t, p.URL, "u_mcp", `{}`); r.Error == nil || !strings.Contains(r.Error.Message, "open https://example.com/connect first") {
		t.Errorf("MCP's -32042 was not passed on with its message: %s", r.Body)
	}
	// Manifold's own 503 (a token service down) is Manifold's to give: an
	// upstream's error that looks like it is the upstream's answer.
	if r := callTool(t, p.URL, "u_busy", `{}`); r.Status != http.StatusOK || r.Header.Get("Retry-After") != "" || r.Error == nil || r.Error.Message != "busy" {
		t.Errorf("an upstream's -32603 with data.retryAfterMs: want HTTP 200 passed as it came, got HTTP %d Retry-After %q: %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	for _, detail := range []string{"password=hunter2 host=db-primary.internal", "db-primary.internal:5432", closed} {
		eventually(t, 5*time.Second, func() error {
			for _, line := range strings.Split(p.Logs.String(), "\n") {
				if strings.Contains(line, detail) && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
					return nil
				}
			}
			return fmt.Errorf("no warning in the log holds %q:\n%s", detail, p.Logs)
		})
	}
}

// A public tool cache shares one caller's results with every other. On an
// upstream that answers each user as themselves (oauth mode user) that is
// one user's identity served to all: validate refuses it, naming the key.
// On one that is given the caller's own credential (forward_headers naming
// a credential header) it is likely the same mistake, unless the upstream
// answers alike whoever asks: a warning, at start as in validate.
func TestPublicToolCacheOnPerUserUpstream(t *testing.T) {
	dir := t.TempDir()
	write := func(name, upstream string) string {
		path := filepath.Join(dir, name)
		yaml := "public_url: https://manifold.example.com\nauth: {bearer_tokens: [static-token-0123456789], authorization_servers: [\"https://as.example.com\"]}\nupstreams:\n" + upstream
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	crm := "  - {name: crm, url: \"https://crm.example.com/mcp\", oauth: {mode: user}, tool_cache: {ttl: 60s, scope: %s}}\n"
	_, errOut, code := runCLI(t, "", "validate", "--config", write("public.yaml", fmt.Sprintf(crm, "public")))
	if code != 1 || !strings.Contains(errOut, "upstreams[0].tool_cache.scope:") {
		t.Errorf("a public tool cache on an oauth mode user upstream: exit %d, %q; want 1 naming upstreams[0].tool_cache.scope", code, errOut)
	}
	if out, errOut, code := runCLI(t, "", "validate", "--config", write("private.yaml", fmt.Sprintf(crm, "private"))); code != 0 || strings.Contains(errOut, "warning") {
		t.Errorf("a private tool cache on an oauth mode user upstream: exit %d, %s%s", code, out, errOut)
	}

	counts := &toolCounts{n: map[string]int{}}
	up := modernSDK(t, cachedToolServer(counts))
	forwarding := httpUpstreamYAML("t", up.URL, "forward_headers: [Authorization]", toolCacheYAML("60s", "public"))
	o := startOps(t, "upstreams:"+forwarding)
	if n := o.logCount("level=WARN", "upstreams[0].tool_cache.scope", "Authorization"); n != 1 {
		t.Errorf("a public tool cache on an upstream given the caller's Authorization: %d warnings naming upstreams[0].tool_cache.scope at start, want 1:\n%s", n, o.Logs)
	}
	quiet := startOps(t, "upstreams:"+httpUpstreamYAML("t", up.URL, toolCacheYAML("60s", "public")))
	if n := quiet.logCount("tool_cache.scope"); n != 0 {
		t.Errorf("a public tool cache on an upstream given no credential was warned about:\n%s", quiet.Logs)
	}
}

// linkingServer is a go-sdk server whose read-only tool "links" answers a
// text, a resource_link to test://d/public, one to test://d/secret, and
// the resource test://d/secret embedded with its text; its prompt "brief"
// embeds test://d/secret too. It counts the tool's calls.
func linkingServer(calls *atomic.Int32) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "linking", Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 60_000, "public" },
	})
	secret := &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://d/secret", MIMEType: "text/plain", Text: "top secret text"}}
	s.AddTool(&mcp.Tool{Name: "links", InputSchema: objectSchema(`{"n":{"type":"number"}}`), Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "here they are"},
				&mcp.ResourceLink{URI: "test://d/public", Name: "public"},
				&mcp.ResourceLink{URI: "test://d/secret", Name: "secret"},
				secret,
			}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "brief"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
			{Role: "user", Content: &mcp.TextContent{Text: "read this"}},
			{Role: "user", Content: secret},
		}}, nil
	})
	return s
}

// A tool an endpoint allows cannot hand out a resource the endpoint
// denies: the resource_links and embedded resources of its result whose
// URI the endpoint's resource rules leave out are dropped, and the
// result's _meta says how many (io.manifold/withheld), never which. The
// same for a prompt's messages. The tool cache keeps the upstream's result
// whole, and each endpoint is served its own view of it, whichever
// endpoint called first.
func TestToolResultsKeepToTheEndpointsView(t *testing.T) {
	var calls atomic.Int32
	up := modernSDK(t, linkingServer(&calls))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("d", up.URL, toolCacheYAML("60s", "public", `tools: ["*"]`))+`
endpoints:
  - path: /mcp/pub
    upstreams: [d]
    resources: {allow: ["d+test://d/public"]}
`)
	pub := strings.TrimSuffix(p.URL, "/mcp") + "/mcp/pub"
	type block struct {
		Type     string `json:"type"`
		URI      string `json:"uri"`
		Text     string `json:"text"`
		Resource *struct {
			URI  string `json:"uri"`
			Text string `json:"text"`
		} `json:"resource"`
	}
	call := func(url string, n int) (blocks []block, meta map[string]any) {
		t.Helper()
		r := post(t, url, headers("tools/call", "d_links"), rpcBody(1, "tools/call", fmt.Sprintf(`"name":"d_links","arguments":{"n":%d}`, n)))
		var res struct {
			Content []block        `json:"content"`
			Meta    map[string]any `json:"_meta"`
		}
		r.result(t, &res)
		if strings.Contains(string(r.Body), "secret") && url == pub {
			t.Errorf("n=%d at /mcp/pub: the answer names the denied resource: %s", n, r.Body)
		}
		return res.Content, res.Meta
	}
	wantWithheld := func(meta map[string]any, n float64) {
		t.Helper()
		w, _ := meta["io.manifold/withheld"].(map[string]any)
		if got, _ := w["items"].(float64); got != n {
			t.Errorf("_meta io.manifold/withheld %v, want %v items", meta["io.manifold/withheld"], n)
		}
	}
	for n, order := range [][]string{{p.URL, pub}, {pub, p.URL}} {
		for _, url := range append(order, order...) {
			blocks, meta := call(url, n)
			if url == pub {
				if len(blocks) != 2 || blocks[0].Text != "here they are" || blocks[1].URI != "d+test://d/public" {
					t.Errorf("n=%d at /mcp/pub: %+v, want the text and the public link", n, blocks)
				}
				wantWithheld(meta, 2)
				continue
			}
			if len(blocks) != 4 || blocks[3].Resource == nil || blocks[3].Resource.Text != "top secret text" {
				t.Errorf("n=%d at /mcp: %+v, want all four blocks", n, blocks)
			}
			if _, ok := meta["io.manifold/withheld"]; ok {
				t.Errorf("n=%d at /mcp: withheld %v", n, meta["io.manifold/withheld"])
			}
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the tool was called %d times for 2 arguments: the cache did not serve both endpoints", n)
	}

	r := post(t, pub, headers("prompts/get", "d_brief"), rpcBody(1, "prompts/get", `"name":"d_brief"`))
	var prompt struct {
		Messages []struct{ Content block } `json:"messages"`
		Meta     map[string]any            `json:"_meta"`
	}
	r.result(t, &prompt)
	if len(prompt.Messages) != 1 || strings.Contains(string(r.Body), "secret") {
		t.Errorf("the prompt at /mcp/pub: %s", r.Body)
	}
	wantWithheld(prompt.Meta, 1)
}
