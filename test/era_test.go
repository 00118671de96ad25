package test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// versionsSeen records the MCP-Protocol-Version of each request a server
// gets, by method.
type versionsSeen struct {
	mu   sync.Mutex
	byMD map[string][]string
}

func (v *versionsSeen) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.mu.Lock()
		m := r.Header.Get("Mcp-Method")
		if m == "" {
			m = "(legacy)"
		}
		v.byMD[m] = append(v.byMD[m], r.Header.Get("MCP-Protocol-Version"))
		v.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (v *versionsSeen) versions(method string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.byMD[method]...)
}

// legacySession opens a 2025-11-25 session declaring caps, and returns the
// headers of its requests.
func legacySession(t *testing.T, url, caps string) http.Header {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	init := post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"raw","version":"1"}}}`)
	h.Set("Mcp-Session-Id", init.Header.Get("Mcp-Session-Id"))
	h.Set("MCP-Protocol-Version", "2025-11-25")
	return h
}

// A 2025-11-25 caller's tool call reaches an upstream that speaks both
// eras in 2025-11-25, as the caller spoke it (the server then does not
// read the modern _meta it would for a modern request), when the caller
// takes no questions; a read (whose answer is cached, and only 2026-07-28
// carries the hints) keeps the modern era, and so do a modern caller's
// call and that of a caller that may be asked something (only a modern
// request can ask it, through input_required).
func TestLegacyCallerSpokenInItsEra(t *testing.T) {
	seen := &versionsSeen{byMD: map[string][]string{}}
	up := serveHTTP(t, seen.wrap(modernHandler(sdkToolServer("web", sdkOptions{resources: 1}))))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("web", up.URL))
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"web_echo","arguments":{"text":"hi"}}}`
	var res callResult
	post(t, p.URL, legacySession(t, p.URL, `{}`), call).result(t, &res)
	if res.Content[0].Text != "web: hi" {
		t.Fatalf("legacy call: %+v", res)
	}
	post(t, p.URL, legacySession(t, p.URL, `{"sampling":{}}`), call).result(t, &res)
	read := `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"web+test://web/0"}}`
	post(t, p.URL, legacySession(t, p.URL, `{}`), read).result(t, &readResult{})
	if modern := toolText(t, p.URL, "web_echo", `{"text":"hi"}`); modern != "web: hi" {
		t.Fatalf("modern call: %q", modern)
	}
	// A modern request carries Mcp-Method; a legacy one does not (its era
	// has no such header), and is recorded as (legacy).
	if calls := seen.versions("tools/call"); len(calls) != 2 || calls[0] != "2026-07-28" {
		t.Errorf("tools/call in 2026-07-28: %v, want the asked caller's and the modern caller's", calls)
	}
	legacy := seen.versions("(legacy)")
	if len(legacy) < 2 || legacy[len(legacy)-1] != "2025-11-25" {
		t.Errorf("requests in 2025-11-25 (initialize, initialized, the call): %v", legacy)
	}
	if reads := seen.versions("resources/read"); len(reads) != 1 || reads[0] != "2026-07-28" {
		t.Errorf("the read: %v, want one in 2026-07-28", reads)
	}
}

// With no cache tier (memory off, no Redis), a read's answer is its
// caller's alone, as a tool call's is: a 2025-11-25 caller's read reaches
// an upstream that speaks both eras in 2025-11-25, comes back in the
// merged namespace with no modern fields, and a missing resource is still
// -32002 to it. A modern caller's read stays modern.
func TestLegacyReadInItsEraWithoutCache(t *testing.T) {
	seen := &versionsSeen{byMD: map[string][]string{}}
	up := serveHTTP(t, seen.wrap(modernHandler(sdkToolServer("web", sdkOptions{resources: 1}))))
	p := startProxy(t, "cache: {memory: {max_bytes: 0}}\nupstreams:"+httpUpstreamYAML("web", up.URL))
	h := legacySession(t, p.URL, `{}`)
	read := func(id int, uri string) *rawResponse {
		return post(t, p.URL, h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/read","params":{"uri":%q}}`, id, uri))
	}
	var res readResult
	read(2, "web+test://web/0").result(t, &res)
	if len(res.Contents) != 1 || res.Contents[0].URI != "web+test://web/0" || res.Contents[0].Text != "web resource 0" || res.ResultType != "" || res.TTLms != nil {
		t.Errorf("legacy read: %+v", res)
	}
	read(3, "web+test://web/missing").wantError(t, http.StatusOK, jsonrpc.CodeLegacyResourceNotFound)
	if reads := seen.versions("resources/read"); len(reads) != 0 {
		t.Errorf("reads in 2026-07-28: %v, want none (the caller's era)", reads)
	}
	if legacy := seen.versions("(legacy)"); len(legacy) < 4 || legacy[len(legacy)-1] != "2025-11-25" {
		t.Errorf("requests in 2025-11-25 (initialize, initialized, two reads): %v", legacy)
	}
	post(t, p.URL, headers("resources/read", "web+test://web/0"), rpcBody(4, "resources/read", `"uri":"web+test://web/0"`)).result(t, &res)
	if reads := seen.versions("resources/read"); len(reads) != 1 || reads[0] != "2026-07-28" {
		t.Errorf("the modern caller's read: %v, want one in 2026-07-28", reads)
	}
}
