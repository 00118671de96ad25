package test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A reload that changes what a caller would list tells it so, as an
// upstream's own list change would: removing an upstream that serves only
// resources sends resources/list_changed, and removing one that serves
// tools, prompts and resources sends all three, to modern listen streams
// and to legacy sessions alike.
func TestReloadTellsListChanges(t *testing.T) {
	web := sdkToolServer("web", sdkOptions{resources: 1})
	webUp := modernSDK(t, web)
	res := modernSDK(t, newSDKServer("res", sdkOptions{resources: 2}))
	both := "upstreams:" + httpUpstreamYAML("web", webUp.URL) + httpUpstreamYAML("res", res.URL)
	p, reload := startReloadable(t, both)

	st := listen(t, p.URL, 3, `{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true}`)
	st.next(t, 5*time.Second) // acknowledged
	legacy := make(chan string, 16)
	cs := legacySDKClient(t, p.URL, "2025-11-25", &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { legacy <- "tools" },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { legacy <- "prompts" },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { legacy <- "resources" },
	})
	_ = cs
	// The legacy client opens its session's stream after it connects: a
	// change before then would reach only the listen (under a loaded
	// machine, this test once waited forever for it).
	metrics := strings.TrimSuffix(p.URL, "/mcp") + "/metrics"
	eventually(t, 10*time.Second, func() error {
		if v, _ := sample(scrapeFamilies(t, metrics), "manifold_subscriptions_open"); v != 2 {
			return fmt.Errorf("manifold_subscriptions_open = %v, want the listen and the session's stream", v)
		}
		return nil
	})
	web.AddTool(&mcp.Tool{Name: "late", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("late"), nil
	})
	select {
	case got := <-legacy:
		if got != "tools" {
			t.Fatalf("legacy session heard %q first", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the legacy session was not told of the upstream's tool list change")
	}
	st.expect(t, 3, "notifications/tools/list_changed", "")

	reload("upstreams:" + httpUpstreamYAML("web", webUp.URL))
	reload("upstreams:" + httpUpstreamYAML("res", res.URL))
	want := []string{"resources", "resources", "tools", "prompts"}
	var modern []string
	for len(modern) < len(want) {
		m := st.next(t, 10*time.Second)
		checkTag(t, m, 3)
		method, _ := m["method"].(string)
		modern = append(modern, listOf(method))
	}
	if !slices.Equal(modern, want) {
		t.Errorf("listen stream told %v, want %v", modern, want)
	}
	var old []string
	for len(old) < len(want) {
		select {
		case l := <-legacy:
			old = append(old, l)
		case <-time.After(10 * time.Second):
			t.Fatalf("legacy session told only %v, want %v", old, want)
		}
	}
	if !slices.Equal(old, want) {
		t.Errorf("legacy session told %v, want %v", old, want)
	}
}

// listOf names the list of a list-changed notification.
func listOf(method string) string {
	for _, l := range []string{"tools", "prompts", "resources"} {
		if method == fmt.Sprintf("notifications/%s/list_changed", l) {
			return l
		}
	}
	return method
}
