package test

import (
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

// An endpoint of `catalog: search` (endpoints[].catalog) lists find_tools
// and call_tool in place of the tools of its upstreams.

const searchEndpointYAML = "endpoints:\n  - path: /mcp/search\n    catalog: search\n"

func searchURL(p *proxy) string { return strings.TrimSuffix(p.URL, "/mcp") + "/mcp/search" }

// foundTools is what find_tools answered, in order.
type foundTools struct {
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
}

func (f foundTools) names() []string {
	var out []string
	for _, t := range f.Tools {
		out = append(out, t.Name)
	}
	return out
}

func sdkSessionAt(t *testing.T, ctx context.Context, url string, o *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, o).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func sdkFind(t *testing.T, ctx context.Context, cs *mcp.ClientSession, query string) foundTools {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": query}})
	if err != nil || res.IsError {
		t.Fatalf("find_tools %q: %v %+v", query, err, res)
	}
	var f foundTools
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("find_tools %q: structuredContent %s: %v", query, b, err)
	}
	return f
}

// contentJSON is what a call answered, to compare: its content and
// whether it is an error (or the error of the call itself).
func contentJSON(res *mcp.CallToolResult, err error) string {
	if err != nil {
		return "call failed: " + err.Error()
	}
	b, _ := json.Marshal(struct {
		Content []mcp.Content
		IsError bool
	}{res.Content, res.IsError})
	return string(b)
}

// Through the go-sdk client, as a host works (list, then call): the search
// endpoint lists the two tools; find_tools finds the everything-server's
// test_simple_text first, with its schema; call_tool answers what
// tools/call at /mcp answers, and so does tools/call of the real name at
// the search endpoint; /mcp is unchanged.
func TestSearchEndpointGoSDK(t *testing.T) {
	p := startProxy(t, searchEndpointYAML+"upstreams:"+httpUpstreamYAML("es", everythingServer(t, true)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	search, main := sdkSessionAt(t, ctx, searchURL(p), nil), sdkSessionAt(t, ctx, p.URL, nil)

	if got := slices.Sorted(maps.Keys(toolNames(t, ctx, search))); !slices.Equal(got, []string{"call_tool", "find_tools"}) {
		t.Fatalf("the search endpoint lists %v, want [call_tool find_tools]", got)
	}
	found := sdkFind(t, ctx, search, "simple text")
	if len(found.Tools) == 0 || found.Tools[0].Name != "es_test_simple_text" || !strings.Contains(string(found.Tools[0].InputSchema), `"type":"object"`) {
		t.Fatalf("find_tools simple text: %v (first schema %s), want es_test_simple_text first with its inputSchema", found.names(), found.Tools[0].InputSchema)
	}
	direct := contentJSON(main.CallTool(ctx, &mcp.CallToolParams{Name: "es_test_simple_text", Arguments: map[string]any{}}))
	via := contentJSON(search.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "es_test_simple_text", "arguments": map[string]any{}}}))
	byName := contentJSON(search.CallTool(ctx, &mcp.CallToolParams{Name: "es_test_simple_text", Arguments: map[string]any{}}))
	if via != direct || byName != direct || !strings.Contains(direct, "text") {
		t.Errorf("call_tool answered %s and tools/call at the search endpoint %s; /mcp answered %s", via, byName, direct)
	}
	all := toolNames(t, ctx, main)
	if all["es_test_simple_text"] == nil || all["find_tools"] != nil || len(all) < 20 {
		t.Errorf("/mcp lists %v", slices.Sorted(maps.Keys(all)))
	}
}

// The same through the TypeScript SDK's client.
func TestSearchEndpointTypeScript(t *testing.T) {
	node := nodeOrSkip(t)
	p := startProxy(t, searchEndpointYAML+"upstreams:"+httpUpstreamYAML("es", everythingServer(t, true)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, tsScript(t, "search-client.mjs"), searchURL(p), p.URL)
	cmd.Stderr = testWriter{t}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TS client: %v\n%s", err, out)
	}
	steps := map[string]json.RawMessage{}
	for line := range strings.Lines(string(out)) {
		var l struct {
			Step  string          `json:"step"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			t.Fatalf("the TS client said %q", line)
		}
		steps[l.Step] = l.Value
	}
	if string(steps["listed"]) != `["call_tool","find_tools"]` {
		t.Errorf("listed %s", steps["listed"])
	}
	var found foundTools
	_ = json.Unmarshal(steps["found"], &found)
	if len(found.Tools) == 0 || found.Tools[0].Name != "es_test_simple_text" || len(found.Tools[0].InputSchema) == 0 {
		t.Errorf("find_tools simple text: %s", steps["found"])
	}
	if string(steps["via"]) != string(steps["direct"]) || len(steps["direct"]) < 10 {
		t.Errorf("call_tool answered %s; /mcp answered %s", steps["via"], steps["direct"])
	}
}

// What the caller's view hides (an upstream its access rules refuse, a
// tool the endpoint's globs deny) is never found, nor called through
// call_tool in any spelling: each answers as a tool that does not exist.
// What it shows is found and called, with progress and a held call's
// questions as tools/call has them.
func TestSearchKeepsToTheCallersView(t *testing.T) {
	is := newIssuer(t)
	openUp := serveHTTP(t, streamingSDK(sdkToolServer("open", sdkOptions{}))) // streams progress
	vaultUp, _ := trackedModern(t, sdkToolServer("vault", sdkOptions{}))
	p := startProxy(t, is.authYAML("")+"endpoints:\n  - path: /mcp/search\n    catalog: search\n    tools: {deny: [open_wait]}\n"+
		"upstreams:"+httpUpstreamYAML("open", openUp.URL)+httpUpstreamYAML("vault", vaultUp.URL, "access: [{claim: groups, values: [eng]}]"))
	eng := is.mint("rsa-1", claims{"sub": "erin", "groups": []string{"eng"}})
	sales := is.mint("rsa-1", claims{"sub": "sam", "groups": []string{"sales"}})
	url := searchURL(p)

	find := func(token, query string) []string {
		t.Helper()

		r := post(t, url, withToken(headers("tools/call", "find_tools"), token), rpcBody(1, "tools/call", fmt.Sprintf(`"name":"find_tools","arguments":{"query":%q,"limit":50}`, query)))
		var res struct{ StructuredContent foundTools }
		r.result(t, &res)
		return res.StructuredContent.names()
	}
	callTool := func(token, name, extra string) *rawResponse {
		quoted, _ := json.Marshal(name)
		return post(t, url, withToken(headers("tools/call", "call_tool"), token), fmt.Sprintf(
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"call_tool","arguments":{"name":%s,"arguments":{"text":"hi"}}%s,%s}}`, quoted, extra, bridgeMeta))
	}
	if got := find(eng, "echo"); !slices.Contains(got, "vault_echo") || !slices.Contains(got, "open_echo") {
		t.Fatalf("erin finds %v for echo, want vault_echo and open_echo", got)
	}
	for _, q := range []string{"echo", "vault", "wait", "vault echo text", "open wait"} {
		for _, name := range find(sales, q) {
			if strings.HasPrefix(name, "vault") || name == "open_wait" {
				t.Errorf("sam's find_tools %q found %s", q, name)
			}
		}
	}
	unknown := callTool(sales, "no_such_tool", "")
	if unknown.Error == nil || unknown.Error.Code != -32602 {
		t.Fatalf("call_tool of no tool: %s", unknown.Body)
	}
	for _, spelled := range []string{"vault_echo", "VAULT_ECHO", " vault_echo", "vault_echo\u0000", "vault__echo", "vault+echo", "open_wait", "Open_Wait"} {
		r := callTool(sales, spelled, "")
		if r.Error == nil || r.Error.Code != unknown.Error.Code || strings.Contains(string(r.Body), "vault:") {
			t.Errorf("sam's call_tool %q answered %s", spelled, r.Body)
		}
	}
	if r := callTool(eng, "vault_echo", ""); !strings.Contains(string(r.Body), "vault: hi") {
		t.Errorf("erin's call_tool vault_echo answered %s", r.Body)
	}

	// A held call: the upstream's questions come back, and the retry of
	// call_tool with the answers completes it.
	var first struct {
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  string                     `json:"requestState"`
	}
	callTool(eng, "open_ask", "").result(t, &first)
	if len(first.InputRequests) != 1 || first.RequestState == "" {
		t.Fatalf("call_tool open_ask: %+v", first)
	}
	key := slices.Collect(maps.Keys(first.InputRequests))[0]
	final := callTool(eng, "open_ask", fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:{"action":"accept","content":{}}}`, first.RequestState, key))
	if !strings.Contains(string(final.Body), "open: answered") {
		t.Errorf("the retry of call_tool open_ask answered %s", final.Body)
	}

	// Progress: the upstream's notifications reach the caller of call_tool,
	// on the request's own stream, before its result.
	meta := strings.Replace(bridgeMeta, `"_meta":{`, `"_meta":{"progressToken":"tok-1",`, 1)
	evs := sseEvents(t, url, withToken(headers("tools/call", "call_tool"), eng), fmt.Sprintf(
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"call_tool","arguments":{"name":"open_progress","arguments":{}},%s}}`, meta))
	progress := 0
	for _, ev := range evs {
		if params, _ := ev["params"].(map[string]any); ev["method"] == "notifications/progress" && params["progressToken"] == "tok-1" {
			progress++
		}
	}
	if progress != 3 || len(evs) == 0 || !strings.Contains(fmt.Sprint(evs[len(evs)-1]["result"]), "open: done") {
		t.Errorf("call_tool open_progress: %d progress events, then %v", progress, evs[len(evs)-1:])
	}
}

// Per-user lists stay per user: before bob consents, his search finds the
// connect tool of the OAuth upstream and none of the tools alice's grant
// lists for her; his call_tool of one asks his own consent.
func TestSearchKeepsPrivateListsApart(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, searchEndpointYAML)
	url := searchURL(p)
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	find := func(token string) []string {
		t.Helper()
		r := post(t, url, withToken(headers("tools/call", "find_tools"), token), rpcBody(1, "tools/call", `"name":"find_tools","arguments":{"query":"whoami connect crm","limit":50}`))
		var res struct{ StructuredContent foundTools }
		r.result(t, &res)
		return res.StructuredContent.names()
	}
	if got := find(alice); !slices.Equal(got, []string{"crm_connect"}) {
		t.Fatalf("before consent alice finds %v, want [crm_connect]", got)
	}
	first := whoami(t, p.URL, alice, "")
	if first.link == "" {
		t.Fatalf("alice was not asked to consent: %+v", first)
	}
	if status, page := consentAs(t, first.link, "alice-at-crm"); status != http.StatusOK {
		t.Fatalf("the callback answered %d: %s", status, page)
	}
	if got := find(alice); !slices.Contains(got, "crm_whoami") || slices.Contains(got, "crm_connect") {
		t.Fatalf("after consent alice finds %v, want crm_whoami and no connect tool", got)
	}
	if got := find(bob); !slices.Equal(got, []string{"crm_connect"}) {
		t.Errorf("bob, who has not consented, finds %v", got)
	}
	r := post(t, url, withToken(headers("tools/call", "call_tool"), bob), rpcBody(2, "tools/call", `"name":"call_tool","arguments":{"name":"crm_whoami","arguments":{}}`))
	if strings.Contains(string(r.Body), "alice") || r.Error == nil {
		t.Errorf("bob's call_tool crm_whoami answered %s", r.Body)
	}
}
