package test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Pagination across upstreams: every resource of every upstream appears
// exactly once, in order, and each downstream page costs at most one
// resources/list round trip per upstream.
func TestPaginationAcrossUpstreams(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 7, pageSize: 3}))
	beta := modernSDK(t, newSDKServer("beta", sdkOptions{resources: 2, pageSize: 3}))
	gamma := legacySDK(t, newSDKServer("gamma", sdkOptions{resources: 11, pageSize: 4}))
	p := startProxy(t, "cursor_secret: paging-test-secret-0123\nupstreams:"+
		httpUpstreamYAML("alpha", alpha.URL)+httpUpstreamYAML("beta", beta.URL)+httpUpstreamYAML("gamma", gamma.URL))

	pages := listAll(t, p.URL, "resources/list")
	calls := map[string]int{"alpha": alpha.Calls.get("resources/list"), "beta": beta.Calls.get("resources/list"), "gamma": gamma.Calls.get("resources/list")}
	want := append(prefixed("alpha", directURIs(t, alpha.URL, "")), prefixed("beta", directURIs(t, beta.URL, ""))...)
	want = append(want, prefixed("gamma", directURIs(t, gamma.URL, "2025-11-25"))...)
	got := uris(pages)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("all pages list\n  %v\nwant\n  %v", got, want)
	}
	// The merged listing is as long as the longest upstream listing, and
	// each downstream page asked each upstream at most once.
	wantPages := 0
	for _, u := range []struct{ n, size int }{{len(directURIs(t, alpha.URL, "")), 3}, {len(directURIs(t, beta.URL, "")), 3}, {len(directURIs(t, gamma.URL, "2025-11-25")), 4}} {
		wantPages = max(wantPages, (u.n+u.size-1)/u.size)
	}
	if len(pages) != wantPages {
		t.Errorf("%d downstream pages, want %d", len(pages), wantPages)
	}
	for name, n := range calls {
		if n > len(pages) {
			t.Errorf("%s got %d resources/list calls for %d downstream pages", name, n, len(pages))
		}
	}
	// Within each page, items are grouped in configuration order.
	for i, pg := range pages {
		var order []string
		for _, r := range pg.Resources {
			name, _, _ := strings.Cut(r["uri"].(string), "+")
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
		}
		if !slices.IsSorted(order) || len(slices.Compact(slices.Clone(order))) != len(order) {
			t.Errorf("page %d groups upstreams as %v", i, order)
		}
	}

	first := pages[0].NextCursor
	if first == "" {
		t.Fatal("no cursor on the first page")
	}
	// A forged cursor: flip one character of the payload, or of the
	// signature, or replace it with garbage.
	payload, sig, _ := strings.Cut(first, ".")
	flipped := []byte(payload)
	flipped[len(flipped)/2] ^= 1
	forged := map[string]string{
		"payload changed":    string(flipped) + "." + sig,
		"signature changed":  payload + "." + base64.RawURLEncoding.EncodeToString([]byte("not the mac")),
		"garbage":            "abc",
		"empty signature":    payload + ".",
		"another method":     "", // filled below
		"upstream cursor":    "Mw",
		"very long":          strings.Repeat("A", 20000) + "." + sig,
		"invalid base64 sig": payload + ".!!!",
	}
	var tpl listResult
	post(t, p.URL, headers("resources/templates/list", ""), rpcBody(1, "resources/templates/list", "")).result(t, &tpl)
	forged["another method"] = first // a resources/list cursor sent to templates/list
	for name, c := range forged {
		method := "resources/list"
		if name == "another method" {
			method = "resources/templates/list"
		}
		r := post(t, p.URL, headers(method, ""), rpcBody(5, method, fmt.Sprintf(`"cursor":%q`, c)))
		r.wantError(t, http.StatusBadRequest, -32602)
	}
	// The genuine cursor still works, on this replica and on another one
	// sharing the secret.
	var again listResult
	post(t, p.URL, headers("resources/list", ""), rpcBody(6, "resources/list", fmt.Sprintf(`"cursor":%q`, first))).result(t, &again)
	replica := startProxy(t, "cursor_secret: paging-test-secret-0123\nupstreams:"+
		httpUpstreamYAML("alpha", alpha.URL)+httpUpstreamYAML("beta", beta.URL)+httpUpstreamYAML("gamma", gamma.URL))
	var other listResult
	post(t, replica.URL, headers("resources/list", ""), rpcBody(7, "resources/list", fmt.Sprintf(`"cursor":%q`, first))).result(t, &other)
	if !slices.Equal(uris([]listResult{again}), uris([]listResult{other})) || len(again.Resources) == 0 {
		t.Errorf("the same cursor gives different pages on two replicas")
	}
	// A replica with another configuration (gamma removed) refuses it as
	// stale rather than skipping or misrouting gamma's position.
	changed := startProxy(t, "cursor_secret: paging-test-secret-0123\nupstreams:"+
		httpUpstreamYAML("alpha", alpha.URL)+httpUpstreamYAML("beta", beta.URL))
	post(t, changed.URL, headers("resources/list", ""), rpcBody(8, "resources/list", fmt.Sprintf(`"cursor":%q`, first))).
		wantError(t, http.StatusBadRequest, -32602)
}

// A cursor older than cursor_ttl is refused.
func TestStaleCursorExpires(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 5, pageSize: 2}))
	p := startProxy(t, "cursor_ttl: 1s\nupstreams:"+httpUpstreamYAML("alpha", alpha.URL))
	var page listResult
	post(t, p.URL, headers("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &page)
	if page.NextCursor == "" {
		t.Fatal("no cursor")
	}
	time.Sleep(2100 * time.Millisecond) // past cursor_ttl, by the clock of the process that signed it
	r := post(t, p.URL, headers("resources/list", ""), rpcBody(2, "resources/list", fmt.Sprintf(`"cursor":%q`, page.NextCursor)))
	r.wantError(t, http.StatusBadRequest, -32602)
	if !strings.Contains(r.Error.Message, "stale") {
		t.Errorf("message %q does not say the cursor is stale", r.Error.Message)
	}
}

// An upstream that dies while answering a list is left out of the page; the
// others still answer, the page is marked stale (ttlMs 0), and the log names
// the upstream.
func TestUpstreamKilledMidList(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 2, ttlMs: 30_000, scope: "public"}))
	inList := make(chan struct{})
	var once sync.Once
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newSDKServer("doomed", sdkOptions{resources: 2}) },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	var doomed *httptest.Server
	doomed = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "resources/list" {
			once.Do(func() { close(inList) })
			// The process dies mid-answer: the connection drops with
			// nothing sent.
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return
		}
		sdk.ServeHTTP(w, r)
	}))
	defer doomed.Close()
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", alpha.URL)+httpUpstreamYAML("doomed", doomed.URL+"/mcp"))

	var page listResult
	post(t, p.URL, headers("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &page)
	<-inList
	got := uris([]listResult{page})
	want := prefixed("alpha", directURIs(t, alpha.URL, ""))
	if !slices.Equal(got, want) {
		t.Errorf("page = %v, want alpha's resources only: %v", got, want)
	}
	if page.TTLms == nil || *page.TTLms != 0 {
		t.Errorf("a page missing an upstream has ttlMs %v, want 0", page.TTLms)
	}
	if !strings.Contains(p.Logs.String(), "upstream=doomed") || !strings.Contains(p.Logs.String(), "left out") {
		t.Errorf("the log does not name the failed upstream:\n%s", p.Logs.String())
	}

	// Killed for good: the server is gone entirely; lists and reads of the
	// others go on, reads of it fail with a clear error.
	doomed.CloseClientConnections()
	doomed.Close()
	post(t, p.URL, headers("resources/list", ""), rpcBody(2, "resources/list", "")).result(t, &page)
	if !slices.Equal(uris([]listResult{page}), want) {
		t.Errorf("after the upstream died the page is %v", uris([]listResult{page}))
	}
	var rr readResult
	post(t, p.URL, headers("resources/read", "alpha+test://alpha/0"), rpcBody(3, "resources/read", `"uri":"alpha+test://alpha/0"`)).result(t, &rr)
	r := post(t, p.URL, headers("resources/read", "doomed+test://doomed/0"), rpcBody(4, "resources/read", `"uri":"doomed+test://doomed/0"`))
	r.wantError(t, http.StatusOK, -32603)
	if !strings.Contains(r.Error.Message, "doomed") || strings.Contains(r.Error.Message, "127.0.0.1") {
		t.Errorf("error %q should name the upstream and not its address", r.Error.Message)
	}
}

// A slow upstream costs its own timeout, not the others' answers.
func TestSlowUpstreamDoesNotBlockOthers(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 1}))
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", alpha.URL)+httpUpstreamYAML("slow", slow.URL, "timeout: 500ms", "protocol: 2026-07-28"))
	start := time.Now()
	var page listResult
	post(t, p.URL, headers("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &page)
	// A bounded wait: the hung upstream costs the list its own 500 ms
	// timeout, not a hang.
	if len(page.Resources) == 0 || time.Since(start) > 5*time.Second {
		t.Errorf("list with a hung upstream: %d items after %v", len(page.Resources), time.Since(start))
	}
	var rr readResult
	post(t, p.URL, headers("resources/read", "alpha+test://alpha/0"), rpcBody(2, "resources/read", `"uri":"alpha+test://alpha/0"`)).result(t, &rr)
	r := post(t, p.URL, headers("resources/read", "slow+test://x"), rpcBody(3, "resources/read", `"uri":"slow+test://x"`))
	r.wantError(t, http.StatusOK, -32603)
	if !strings.Contains(r.Error.Message, "timed out") {
		t.Errorf("timeout error message %q", r.Error.Message)
	}
}

// When an upstream stops accepting the cursor it gave (its listing moved
// on), the client is told its cursor is stale, and listing again from the
// start works: the cached pages that carried the dead cursor are dropped.
// The upstream is a minimal hand-written 2026-07-28 server, because the
// SDKs' cursors never expire.
func TestUpstreamCursorExpiry(t *testing.T) {
	var epoch atomic.Int32
	var firstPages atomic.Int32
	up := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Cursor string `json:"cursor"`
			} `json:"params"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		meta := `"resultType":"complete","ttlMs":600000,"cacheScope":"public"`
		var result string
		switch {
		case m.Method == "server/discover":
			result = `{"supportedVersions":["2026-07-28"],"capabilities":{"resources":{}},` + meta + `}`
		case m.Method == "resources/list" && m.Params.Cursor == "":
			firstPages.Add(1)
			result = fmt.Sprintf(`{"resources":[{"uri":"test://a","name":"a"}],"nextCursor":"c%d",%s}`, epoch.Load(), meta)
		case m.Method == "resources/list" && m.Params.Cursor == fmt.Sprintf("c%d", epoch.Load()):
			// The last page is never cached, so a dead cursor reaches
			// the upstream.
			result = `{"resources":[{"uri":"test://b","name":"b"}],"resultType":"complete","ttlMs":0,"cacheScope":"public"}`
		case m.Method == "resources/list":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"invalid cursor"}}`, m.ID)
			return
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result)
	}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("x", up.URL))
	if got := uris(listAll(t, p.URL, "resources/list")); !slices.Equal(got, []string{"x+test://a", "x+test://b"}) {
		t.Fatalf("listing %v", got)
	}
	var first listResult
	post(t, p.URL, headers("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &first)
	if firstPages.Load() != 1 {
		t.Fatalf("the first page was not cached (%d upstream calls)", firstPages.Load())
	}
	epoch.Add(1) // the upstream's listing moves on: its old cursor is dead
	post(t, p.URL, headers("resources/list", ""), rpcBody(2, "resources/list", fmt.Sprintf(`"cursor":%q`, first.NextCursor))).
		wantError(t, http.StatusBadRequest, -32602)
	if got := uris(listAll(t, p.URL, "resources/list")); !slices.Equal(got, []string{"x+test://a", "x+test://b"}) {
		t.Errorf("listing again from the start: %v", got)
	}
}

// An upstream whose nextCursor is over 1 KiB (merge.MaxUpstreamCursor) is
// left out of the merged page, as a malformed answer: its cursor is not
// carried in Manifold's, which stays short enough for a client to bring
// back, and the other upstreams page on.
func TestOversizedUpstreamCursorLeftOut(t *testing.T) {
	huge := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		meta := `"resultType":"complete","ttlMs":0,"cacheScope":"public"`
		switch m.Method {
		case "server/discover":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"resources":{}},%s}}`, m.ID, meta)
		case "resources/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resources":[{"uri":"test://h","name":"h"}],"nextCursor":%q,%s}}`, m.ID, strings.Repeat("<", 4096), meta)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
		}
	}))
	good := modernSDK(t, newSDKServer("good", sdkOptions{resources: 3, pageSize: 2}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("huge", huge.URL)+httpUpstreamYAML("good", good.URL))
	var first listResult
	post(t, p.URL, headers("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &first)
	if len(first.NextCursor) > 1024 {
		t.Errorf("Manifold's cursor is %d bytes: it carries the oversized one", len(first.NextCursor))
	}
	got := uris(listAll(t, p.URL, "resources/list"))
	if slices.Contains(got, "huge+test://h") || !slices.Contains(got, "good+test://good/2") {
		t.Errorf("listing %v: want every page of the good upstream and nothing of the one with a 4 KiB cursor", got)
	}
}

// An upstream that answers a list with null for its items (a legacy SDK
// serializing a nil slice) contributes nothing; the merged answer stays
// valid JSON with the other upstream's items.
func TestNullListMerged(t *testing.T) {
	null := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		meta := `"resultType":"complete","ttlMs":0,"cacheScope":"public"`
		switch m.Method {
		case "server/discover":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"resources":{}},%s}}`, m.ID, meta)
		case "resources/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resources":null,%s}}`, m.ID, meta)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
		}
	}))
	good := modernSDK(t, newSDKServer("good", sdkOptions{resources: 2}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("empty", null.URL)+httpUpstreamYAML("good", good.URL))
	var page listResult
	post(t, p.URL, headers("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &page)
	if got := uris([]listResult{page}); !slices.Contains(got, "good+test://good/1") {
		t.Errorf("merged list %v: want the good upstream's resources", got)
	}
}
