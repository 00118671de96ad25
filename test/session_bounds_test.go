package test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// What one caller may hold of the legacy sessions: its share of them
// (sessions.max_per_principal) beside the bound of all (sessions.max), in
// process and in Redis across replicas, and the size of what a session keeps
// of the client.

// initializeAs opens a legacy session with token tok ("" for none) and
// returns the raw answer.
func initializeAs(t *testing.T, url, tok string) *rawResponse {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	return post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
}

// wantOpened asserts that r opened a session, and returns its id.
func wantOpened(t *testing.T, r *rawResponse, who string) string {
	t.Helper()
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Status != http.StatusOK || r.Error != nil || sid == "" {
		t.Fatalf("%s: initialize refused: HTTP %d %s", who, r.Status, r.Body)
	}
	return sid
}

// wantShareRefused asserts the refusal of a principal past its share: 429
// and -32600 naming sessions.max_per_principal.
func wantShareRefused(t *testing.T, r *rawResponse, who string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "sessions.max_per_principal") {
		t.Fatalf("%s past its share: HTTP %d %s, want 429 with -32600 naming sessions.max_per_principal", who, r.Status, r.Body)
	}
}

// wantFull asserts the refusal past sessions.max: 503 and -32603 naming
// sessions.max, and not the share.
func wantFull(t *testing.T, r *rawResponse, who string) {
	t.Helper()
	if r.Status != http.StatusServiceUnavailable || r.Error == nil || r.Error.Code != -32603 ||
		!strings.Contains(r.Error.Message, "sessions.max") || strings.Contains(r.Error.Message, "per_principal") {
		t.Fatalf("%s past sessions.max: HTTP %d %s, want 503 with -32603 naming sessions.max", who, r.Status, r.Body)
	}
}

// One principal opening sessions up to its share is refused the next one,
// distinctly from a full server, while another principal still opens its
// own; ending a session gives its place back.
func TestSessionSharePerPrincipal(t *testing.T) {
	is := newIssuer(t)
	_, _, p := hintedProxy(t, is.authYAML("")+"sessions: {max: 5, max_per_principal: 2}\n")
	alice, bob, carol, dave := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("ec-1", claims{"sub": "bob"}), is.mint("rsa-1", claims{"sub": "carol"}), is.mint("rsa-1", claims{"sub": "dave"})
	first := wantOpened(t, initializeAs(t, p.URL, alice), "alice 1")
	wantOpened(t, initializeAs(t, p.URL, alice), "alice 2")
	wantShareRefused(t, initializeAs(t, p.URL, alice), "alice 3")
	// A refreshed token of the same principal has the same share.
	wantShareRefused(t, initializeAs(t, p.URL, is.mint("ec-1", claims{"sub": "alice"})), "alice with another token")
	wantOpened(t, initializeAs(t, p.URL, bob), "bob 1")
	wantOpened(t, initializeAs(t, p.URL, bob), "bob 2")
	wantOpened(t, initializeAs(t, p.URL, carol), "carol 1")
	wantFull(t, initializeAs(t, p.URL, dave), "dave")
	del := do(t, http.MethodDelete, p.URL, http.Header{"Mcp-Session-Id": {first}, "Authorization": {"Bearer " + alice}}, "")
	if del.Status != http.StatusOK {
		t.Fatalf("DELETE: HTTP %d %s", del.Status, del.Body)
	}
	wantOpened(t, initializeAs(t, p.URL, alice), "alice after ending one")
}

// Without authentication there is no principal: however many sessions
// one address opens, only sessions.max refuses one.
func TestSessionNoShareWithoutAuth(t *testing.T) {
	_, _, p := hintedProxy(t, "sessions: {max: 4, max_per_principal: 1}\n")
	for i := 1; i <= 4; i++ {
		wantOpened(t, initializeAs(t, p.URL, ""), fmt.Sprintf("session %d", i))
	}
	wantFull(t, initializeAs(t, p.URL, ""), "session 5")
}

// The same with sessions in Redis shared by two replicas: the share and
// sessions.max hold across them, whichever replica a caller reaches, and
// sessions that expire give their places back.
func TestSessionShareAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	is := newIssuer(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	shared := is.authYAML("") + fmt.Sprintf("sessions: {max: 4, max_per_principal: 2, idle_timeout: 2s}\ncache: {secret: session-secret-0123456789, redis: {url: %q}}\n", rs.URL())
	a, b := cachedProxy(t, up.URL, shared), cachedProxy(t, up.URL, shared)
	alice, bob, carol := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"}), is.mint("rsa-1", claims{"sub": "carol"})
	wantOpened(t, initializeAs(t, a.URL, alice), "alice on a")
	wantOpened(t, initializeAs(t, b.URL, alice), "alice on b")
	wantShareRefused(t, initializeAs(t, a.URL, alice), "alice on a")
	wantShareRefused(t, initializeAs(t, b.URL, alice), "alice on b")
	wantOpened(t, initializeAs(t, b.URL, bob), "bob on b")
	wantOpened(t, initializeAs(t, a.URL, bob), "bob on a")
	wantFull(t, initializeAs(t, a.URL, carol), "carol on a")
	wantFull(t, initializeAs(t, b.URL, carol), "carol on b")
	// Nobody uses them: after idle_timeout they are gone, one after the
	// other, and count no more.
	opens := func(p *proxy, tok, who string) {
		t.Helper()
		eventually(t, 15*time.Second, func() error {
			if r := initializeAs(t, p.URL, tok); r.Status != http.StatusOK {
				return fmt.Errorf("%s once sessions expired: HTTP %d %s", who, r.Status, r.Body)
			}
			return nil
		})
	}
	opens(b, carol, "carol")
	opens(a, alice, "alice")
	opens(b, alice, "alice")
	wantShareRefused(t, initializeAs(t, a.URL, alice), "alice again")
}

// initializeSized sends an initialize whose capabilities and clientInfo
// each carry a string of n bytes.
func initializeSized(t *testing.T, url string, capsN, infoN int) *rawResponse {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"experimental":{"pad":%q}},"clientInfo":{"name":"raw","version":"1","description":%q}}}`,
		strings.Repeat("c", capsN), strings.Repeat("i", infoN))
	return legacyPost(t, url, "", body)
}

// sessionBound is what a session may keep of each of the client's
// capabilities and clientInfo, and pad the bytes of initializeSized's JSON
// around its padding.
const (
	sessionBound = 16 << 10
	capsPad      = len(`{"experimental":{"pad":""}}`)
	infoPad      = len(`{"name":"raw","version":"1","description":""}`)
)

// Capabilities or clientInfo over 16 KiB are refused at initialize (HTTP
// 400, -32602, naming which); at the bound they are kept. However many
// sessions try to store megabytes, what they hold stays within the bound:
// in process, and in Redis.
func TestSessionClientInfoBounded(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			extra := "max_request_bytes: 4MiB\n"
			var rs *redistest.Server
			if store == "redis" {
				rs = redistest.Start(t)
				extra += fmt.Sprintf("cache: {secret: session-secret-0123456789, redis: {url: %q}}\n", rs.URL())
			}
			p, _ := legacyFixture(t, extra)
			for what, r := range map[string]*rawResponse{
				"capabilities": initializeSized(t, p.URL, sessionBound-capsPad+1, 10),
				"clientInfo":   initializeSized(t, p.URL, 10, sessionBound-infoPad+1),
			} {
				if r.Status != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, what) || r.Header.Get("Mcp-Session-Id") != "" {
					t.Errorf("%s one byte over 16 KiB: HTTP %d %s, want 400 with -32602 naming it", what, r.Status, r.Body)
				}
			}
			wantOpened(t, initializeSized(t, p.URL, sessionBound-capsPad, sessionBound-infoPad), "at the bound")

			const n = 30
			before := heapBytes()
			var redisBefore int64
			if rs != nil {
				redisBefore = redisMemory(t, rs)
			}
			opened := 0
			for i := 0; i < n; i++ {
				// What a client could make a session keep before the bound:
				// 1.5 MiB of each; then the most it may now.
				if r := initializeSized(t, p.URL, 3<<19, 3<<19); r.Status == http.StatusOK {
					opened++
				}
				wantOpened(t, initializeSized(t, p.URL, sessionBound-capsPad, sessionBound-infoPad), "at the bound")
			}
			if opened > 0 {
				t.Errorf("%d of %d sessions with 1.5 MiB capabilities and clientInfo were opened", opened, n)
			}
			// Each session is kept once (twice in Redis: the value and the
			// replica's recent copy), plus the store's own bookkeeping.
			limit := int64(n * 2 * sessionBound * 3)
			grew := heapBytes() - before
			t.Logf("%d sessions at the bound: the heap grew by %d bytes", n, grew)
			if grew > limit+8<<20 {
				t.Errorf("the heap grew by %d bytes for %d sessions at the bound, want at most %d", grew, n, limit+8<<20)
			}
			if rs != nil {
				grew := redisMemory(t, rs) - redisBefore
				t.Logf("%d sessions at the bound: Redis grew by %d bytes", n, grew)
				if grew > limit {
					t.Errorf("Redis memory grew by %d bytes for %d sessions at the bound, want at most %d", grew, n, limit)
				}
			}
		})
	}
}

// heapBytes is the live heap after a collection.
func heapBytes() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// redisMemory is the used_memory Redis reports.
func redisMemory(t *testing.T, rs *redistest.Server) int64 {
	t.Helper()
	info, err := rs.Client().Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in %q", info)
	return 0
}
