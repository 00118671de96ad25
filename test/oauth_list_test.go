package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The consent reached from the list, as a host reaches it: an agent lists
// tools and calls what the list shows.

// toolNames lists every tool cs is shown, over all pages.
func toolNames(t *testing.T, ctx context.Context, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	tools := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		tools[tool.Name] = tool
	}
	return tools
}

// A go-sdk client (2025-11-25, URL elicitation) that has not authorized
// crm is shown crm_connect and nothing else of crm; calling it asks the
// consent, which the user gives in the browser; the call then says the
// account is connected, the session is told the tool list changed, and
// the list shows crm's real tools, which work. Bob, who consented to
// nothing, is shown only his own crm_connect, never a name Alice's list
// holds.
func TestOAuthConnectToolGoSDK(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	changed := make(chan struct{}, 8)
	asked := 0
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			if status, page := consentAs(t, req.Params.URL, "alice-at-crm"); status != http.StatusOK {
				t.Errorf("the callback answered %d: %s", status, page)
			}
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.URL, HTTPClient: &http.Client{Transport: bearerTransport{alice}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	before := toolNames(t, ctx, cs)
	connect, ok := before["crm_connect"]
	if !ok || len(before) != 1 {
		t.Fatalf("before consent, alice is shown %v, want [crm_connect]", slices.Sorted(maps.Keys(before)))
	}
	schema, _ := json.Marshal(connect.InputSchema)
	if connect.Title != "Connect crm" || connect.Description == "" || string(schema) != `{"type":"object"}` {
		t.Errorf("crm_connect: title %q, description %q, input schema %s", connect.Title, connect.Description, schema)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "crm_connect"})
	if err != nil || res.IsError || asked != 1 {
		t.Fatalf("crm_connect: %v %+v (asked %d times)", err, res, asked)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, "connected") {
		t.Errorf("crm_connect said %q", text)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed after the consent")
	}
	after := toolNames(t, ctx, cs)
	if _, still := after["crm_connect"]; still || after["crm_whoami"] == nil {
		t.Fatalf("after consent, alice is shown %v, want crm's real tools", slices.Sorted(maps.Keys(after)))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "crm_whoami"})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "you are alice-at-crm" {
		t.Fatalf("crm_whoami after consent: %v %+v", err, res)
	}

	// Bob's list is his own.
	bob := is.mint("rsa-1", claims{"sub": "bob"})
	r := post(t, p.URL, withToken(headers("tools/list", ""), bob), `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+oauthMeta+`}}`)
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	r.result(t, &list)
	if len(list.Tools) != 1 || list.Tools[0].Name != "crm_connect" {
		t.Errorf("bob, who consented to nothing, is shown %s", r.Body)
	}
	if asked != 1 {
		t.Errorf("alice was asked %d times", asked)
	}
}

// The TypeScript SDK v1 client, as an agent embeds it, does the same:
// it is shown crm_connect alone, calls it, is asked (URL elicitation on
// its session) to open the link, which the user's browser follows; the
// call says the account is connected, the session is told the tool list
// changed, and the list then holds crm_whoami, which answers as the user.
func TestOAuthConnectToolTypeScript(t *testing.T) {
	node := nodeOrSkip(t)
	script := tsScript(t, "connect-client.mjs")
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, p.URL, is.mint("rsa-1", claims{"sub": "alice"}))
	cmd.Stderr = testWriter{t}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	steps := map[string]string{}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		var l struct {
			Step  string          `json:"step"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal(lines.Bytes(), &l) != nil {
			t.Fatalf("client said %q", lines.Text())
		}
		steps[l.Step] = string(l.Value)
		if l.Step == "elicit" {
			var e struct{ Mode, URL string }
			_ = json.Unmarshal(l.Value, &e)
			if status, page := consentAs(t, e.URL, "alice-at-crm"); e.Mode != "url" || status != http.StatusOK {
				t.Errorf("asked %s; the callback answered %d: %s", l.Value, status, page)
			}
			fmt.Fprintln(stdin, "consented")
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("client: %v (steps %v)", err, steps)
	}
	var before []struct {
		Name, Title, Description string
		InputSchema              json.RawMessage
	}
	_ = json.Unmarshal([]byte(steps["before"]), &before)
	if len(before) != 1 || before[0].Name != "crm_connect" || before[0].Title != "Connect crm" || before[0].Description == "" || string(before[0].InputSchema) != `{"type":"object"}` {
		t.Errorf("before consent, the list: %s", steps["before"])
	}
	if !strings.Contains(steps["connect"], "connected") || steps["elicit"] == "" {
		t.Errorf("crm_connect: %s (asked: %s)", steps["connect"], steps["elicit"])
	}
	if steps["changed"] != "true" {
		t.Errorf("tools/list_changed after the consent: %s", steps["changed"])
	}
	if !strings.Contains(steps["after"], `"crm_whoami"`) || strings.Contains(steps["after"], "crm_connect") {
		t.Errorf("after consent, the list: %s", steps["after"])
	}
	if steps["whoami"] != `"you are alice-at-crm"` {
		t.Errorf("crm_whoami: %s", steps["whoami"])
	}
}

// /ui/state shows, per OAuth upstream, how many principals hold a grant,
// how many consents are pending, and the last refresh the authorization
// server refused, and never a token, a state or a link: Alice holds a
// grant; Bob was asked and has not consented; Carol's grant was revoked,
// so her refresh was refused and she is asked again.
func TestOAuthUIShowsGrants(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "admin: {operators: [{claim: sub, values: [root]}]}\n")
	alice, bob, carol := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"}), is.mint("rsa-1", claims{"sub": "carol"})
	authorize(t, p.URL, alice, "alice-at-crm")
	authorize(t, p.URL, carol, "carol-at-crm")
	bobAsked := whoami(t, p.URL, bob, "")
	as.revoke("carol-at-crm", true)
	carolAsked := whoami(t, p.URL, carol, "")
	if bobAsked.link == "" || carolAsked.link == "" {
		t.Fatalf("bob %+v, carol %+v: both should be asked", bobAsked, carolAsked)
	}
	_, body := fetch(t, http.MethodGet, strings.TrimSuffix(p.URL, "/mcp")+"/ui/state", bearerHeader(is.mint("rsa-1", claims{"sub": "root"})))
	var st struct {
		Upstreams []struct {
			Name  string
			OAuth *struct {
				Grants, Pending                   int
				LastRefreshFailure, LastRefreshAt string
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Upstreams) != 1 || st.Upstreams[0].OAuth == nil {
		t.Fatalf("/ui/state: %v %s", err, body)
	}
	o := st.Upstreams[0].OAuth
	if o.Grants != 1 || o.Pending != 2 || !strings.Contains(o.LastRefreshFailure, "invalid_grant") || o.LastRefreshAt == "" {
		t.Errorf("/ui/state's crm: %+v", *o)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	for _, secret := range append([]string{stateOf(t, bobAsked.link), stateOf(t, carolAsked.link), "/oauth/connect", alice, bob, carol}, keysOf(as.access, as.refresh)...) {
		if strings.Contains(body, secret) {
			t.Errorf("/ui/state shows %q", secret)
		}
	}
}

// keysOf are the keys of maps.
func keysOf(ms ...map[string]string) []string {
	var out []string
	for _, m := range ms {
		out = slices.AppendSeq(out, maps.Keys(m))
	}
	return out
}
