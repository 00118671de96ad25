package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// uiSessions reads the admin page's session figures.
func uiSessions(t *testing.T, o *opsProcess) (open int) {
	t.Helper()
	code, body := o.get(t, "/ui/state")
	var s struct {
		Sessions int `json:"sessions"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("/ui/state: %d %s", code, body)
	}
	return s.Sessions
}

// A legacy session its client abandoned (no DELETE, no stream, no
// request) is not counted as open once it has been idle for two
// keep-alive intervals, though it is kept, and works, until its idle
// timeout; one whose stream is open is counted throughout.
func TestIdleSessionsNotCountedOpen(t *testing.T) {
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	o := startOps(t, "sessions: {idle_timeout: 1m}\nsubscriptions: {keepalive: 300ms}\nupstreams:"+httpUpstreamYAML("a", up.URL))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	abandoned, _ := initialize(t, o.MCP, "2025-11-25")
	legacyPost(t, o.MCP, abandoned, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	streaming, _ := initialize(t, o.MCP, "2025-11-25")
	legacyPost(t, o.MCP, streaming, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	openSessionStream(t, o.MCP, streaming)
	if n := uiSessions(t, o); n != 2 {
		t.Fatalf("%d sessions open just after two initialized", n)
	}
	eventually(t, 10*time.Second, func() error {
		if n := uiSessions(t, o); n != 1 {
			return fmt.Errorf("%d sessions shown open, want 1 (the abandoned one is idle)", n)
		}
		return nil
	})
	fams := scrapeFamilies(t, o.Admin+"/metrics")
	if v, _ := sample(fams, "manifold_sessions_open"); v != 1 {
		t.Errorf("manifold_sessions_open = %v, want 1", v)
	}
	if v, _ := sample(fams, "manifold_sessions_held"); v != 2 {
		t.Errorf("manifold_sessions_held = %v, want 2 (both count against sessions.max until their idle timeout)", v)
	}
	// Idle is not gone: the session still answers, and is open again.
	if r := legacyPost(t, o.MCP, abandoned, `{"jsonrpc":"2.0","id":5,"method":"ping"}`); r.Status != http.StatusOK || r.Error != nil {
		t.Fatalf("the idle session no longer answers: %d %s", r.Status, r.Body)
	}
	if n := uiSessions(t, o); n != 2 {
		t.Errorf("%d sessions open after the idle one was used again", n)
	}
}
