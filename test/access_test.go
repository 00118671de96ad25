package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// accessFixture is an open upstream and one only the eng group may use,
// behind a Manifold trusting a test issuer, with a token of each group.
type accessFixture struct {
	p            *proxy
	vault        *mcp.Server
	vaultWatch   *listenTracker
	eng, sales   string
	engH, salesH func(method, name string) http.Header
}

func newAccessFixture(t *testing.T) *accessFixture {
	is := newIssuer(t)
	open, vault := sdkToolServer("open", sdkOptions{resources: 2}), sdkToolServer("vault", sdkOptions{resources: 2})
	openUp, _ := trackedModern(t, open)
	vaultUp, lt := trackedModern(t, vault)
	p := startProxy(t, is.authYAML("")+"upstreams:"+httpUpstreamYAML("open", openUp.URL)+
		httpUpstreamYAML("vault", vaultUp.URL, "access: [{claim: groups, values: [eng]}]"))
	f := &accessFixture{p: p, vault: vault, vaultWatch: lt,
		eng:   is.mint("rsa-1", claims{"sub": "erin", "groups": []string{"all", "eng"}}),
		sales: is.mint("rsa-1", claims{"sub": "sam", "groups": []string{"all", "sales"}}),
	}
	as := func(tok string) func(string, string) http.Header {
		return func(method, name string) http.Header {
			h := headers(method, name)
			h.Set("Authorization", "Bearer "+tok)
			return h
		}
	}
	f.engH, f.salesH = as(f.eng), as(f.sales)
	return f
}

// A principal whose claims match no access rule of an upstream does not
// see it: its resources, templates, tools and prompts are missing from the
// lists, its URIs and names answer exactly as those of an upstream that
// does not exist (a legacy caller gets -32002), and nothing in Manifold's
// own description names it. A principal the rule admits sees and uses it.
func TestAccessRulesHideUpstreams(t *testing.T) {
	f := newAccessFixture(t)
	for _, method := range []string{"resources/list", "resources/templates/list", "tools/list", "prompts/list", "server/discover"} {
		eng := post(t, f.p.URL, f.engH(method, ""), rpcBody(1, method, ""))
		sales := post(t, f.p.URL, f.salesH(method, ""), rpcBody(1, method, ""))
		if eng.Status != 200 || sales.Status != 200 {
			t.Fatalf("%s: HTTP %d, %d", method, eng.Status, sales.Status)
		}
		if strings.Contains(string(sales.Result), "vault") {
			t.Errorf("%s as sales names the hidden upstream: %s", method, sales.Result)
		}
		if method != "server/discover" && !strings.Contains(string(eng.Result), "vault") {
			t.Errorf("%s as eng lacks the upstream: %s", method, eng.Result)
		}
	}
	calls := []struct{ method, name, params string }{
		{"resources/read", "%s+test://%s/0", `"uri":%q`},
		{"tools/call", "%s_echo", `"name":%q,"arguments":{"text":"x"}`},
		{"prompts/get", "%s_greet", `"name":%q,"arguments":{"who":"x"}`},
	}
	for _, c := range calls {
		name := func(up string) string { return strings.ReplaceAll(c.name, "%s", up) }
		ask := func(h func(string, string) http.Header, up string) *rawResponse {
			return post(t, f.p.URL, h(c.method, name(up)), rpcBody(1, c.method, fmt.Sprintf(c.params, name(up))))
		}
		if r := ask(f.engH, "vault"); r.Status != 200 || r.Error != nil {
			t.Errorf("%s %s as eng: HTTP %d %s", c.method, name("vault"), r.Status, r.Body)
		}
		hidden, missing := ask(f.salesH, "vault"), ask(f.salesH, "nosuch")
		if hidden.Error == nil || missing.Error == nil || hidden.Status != missing.Status || hidden.Error.Code != missing.Error.Code ||
			strings.ReplaceAll(hidden.Error.Message, "vault", "nosuch") != missing.Error.Message {
			t.Errorf("%s as sales: hidden %d %s, nonexistent %d %s", c.method, hidden.Status, hidden.Body, missing.Status, missing.Body)
		}
	}
	// A legacy caller of the sales group reading the hidden upstream's
	// resource gets the legacy not-found, -32002.
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + f.sales}}
	r := post(t, f.p.URL, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	h.Set("Mcp-Session-Id", r.Header.Get("Mcp-Session-Id"))
	h.Set("MCP-Protocol-Version", "2025-11-25")
	if strings.Contains(string(r.Body), "vault") {
		t.Errorf("initialize as sales names the hidden upstream: %s", r.Body)
	}
	if r := post(t, f.p.URL, h, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"vault+test://vault/0"}}`); r.Error == nil || r.Error.Code != -32002 {
		t.Errorf("legacy read of the hidden upstream: %s", r.Body)
	}
}

// Subscriptions follow the same view: a sales listener's watch of the
// hidden upstream's resource is not honoured and never reaches it, and its
// list changes are not told to sales, while an eng listener gets them.
func TestAccessRulesInSubscriptions(t *testing.T) {
	f := newAccessFixture(t)
	filter := `{"toolsListChanged":true,"resourceSubscriptions":["open+test://open/0","vault+test://vault/0"]}`
	sales := listen(t, f.p.URL, 1, filter, "Authorization", "Bearer "+f.sales)
	ack := sales.next(t, 5*time.Second)
	if got := fmt.Sprint(ack["params"]); strings.Contains(got, "vault") || !strings.Contains(got, "open+test://open/0") {
		t.Errorf("sales acknowledged %s", got)
	}
	eng := listen(t, f.p.URL, 2, filter, "Authorization", "Bearer "+f.eng)
	if got := fmt.Sprint(eng.next(t, 5*time.Second)["params"]); !strings.Contains(got, "vault+test://vault/0") {
		t.Errorf("eng acknowledged %s", got)
	}
	eventually(t, 5*time.Second, func() error {
		if n := f.vaultWatch.watching("test://vault/0"); n != 1 {
			return fmt.Errorf("the hidden upstream watches its resource on %d streams, want 1 (eng's)", n)
		}
		return nil
	})
	f.vault.AddTool(&mcp.Tool{Name: "fresh", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("fresh"), nil
	})
	eng.expect(t, 2, "notifications/tools/list_changed", "")
	sales.quiet(t, 500*time.Millisecond, "a tool change of the hidden upstream")
}
