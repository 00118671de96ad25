package test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

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
