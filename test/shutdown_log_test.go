package test

import (
	"net/http"
	"strings"
	"testing"
)

// A clean shutdown, with listen streams and a legacy session's stream open
// on a modern and a legacy upstream, logs nothing that is not a problem:
// no warning, no error.
func TestCleanShutdownLogsNoWarning(t *testing.T) {
	modern := modernSDK(t, newHintedServer().Server)
	legacy := legacySDK(t, newHintedServer().Server)
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", modern.URL)+httpUpstreamYAML("b", legacy.URL))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready", "b": "ready"})
	for i, uri := range []string{"a+test://pub/1", "b+test://pub/1"} {
		st := listen(t, o.MCP, 20+i, `{"resourceSubscriptions":["`+uri+`"],"resourcesListChanged":true}`)
		st.expect(t, 20+i, "notifications/subscriptions/acknowledged", "")
	}
	sid, _ := initialize(t, o.MCP, "2025-11-25")
	legacyPost(t, o.MCP, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	legacyPost(t, o.MCP, sid, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"a+test://pub/2"}}`)
	openSessionStream(t, o.MCP, sid)
	o.stop(t)
	logs := o.Logs.String()
	_, after, ok := strings.Cut(logs, `msg="manifold shutting down"`)
	if !ok || !strings.Contains(after, `msg="manifold stopped"`) {
		t.Fatalf("no clean shutdown in the log:\n%s", logs)
	}
	for _, line := range strings.Split(after, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("shutdown logged: %s", line)
		}
	}
}
