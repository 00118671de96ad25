package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// threeToolKinds starts the three kinds of tool upstream behind a prefix
// Manifold: "web" (go-sdk 2026-07-28 over HTTP, SSE answers), "old" (mcp-go
// 2025-11-25 over HTTP) and "kid" (a go-sdk stdio child). extra is added to
// the top of the config.
func threeToolKinds(t *testing.T, extra string) (*proxy, *httpUpstream) {
	web := serveHTTP(t, streamingSDK(sdkToolServer("web", sdkOptions{resources: 2, pageSize: 3})))
	old := serveHTTP(t, mcpgoToolServer("old", false))
	p := startProxy(t, extra+"upstreams:"+httpUpstreamYAML("web", web.URL)+httpUpstreamYAML("old", old.URL)+childUpstream("kid", "sdk-tools:kid"))
	return p, web
}

func names(pages []listResult, member string) []string {
	var out []string
	for _, p := range pages {
		items := p.Tools
		if member == "prompts" {
			items = p.Prompts
		}
		for _, it := range items {
			out = append(out, it["name"].(string))
		}
	}
	slices.Sort(out)
	return out
}

type callResult struct {
	ResultType string `json:"resultType"`
	Content    []struct {
		Type     string         `json:"type"`
		Text     string         `json:"text"`
		URI      string         `json:"uri"`
		Resource map[string]any `json:"resource"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	RequestState      string         `json:"requestState"`
	InputRequests     map[string]any `json:"inputRequests"`
	Meta              map[string]any `json:"_meta"`
}

func callTool(t testing.TB, url, name, args string) *rawResponse {
	t.Helper()
	return post(t, url, headers("tools/call", name), rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":%s`, name, args)))
}

func toolText(t testing.TB, url, name, args string) string {
	t.Helper()
	var r callResult
	callTool(t, url, name, args).result(t, &r)
	if r.ResultType != "complete" || len(r.Content) == 0 {
		t.Fatalf("%s: %+v", name, r)
	}
	return r.Content[0].Text
}

// Tools and prompts of three kinds of upstream are listed merged, across
// pages, each under its upstream's prefix (the same name on all three stays
// three tools), and every call reaches the upstream its prefix names. A
// tool with an invalid x-mcp-header annotation is not listed.
func TestToolsAndPromptsMergedAndRouted(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	pages := listAll(t, p.URL, "tools/list")
	got := names(pages, "tools")
	for _, want := range []string{"web_echo", "old_echo", "kid_echo", "web_link", "kid_link", "web_progress", "old_progress", "kid_wait"} {
		if !slices.Contains(got, want) {
			t.Errorf("tools/list lacks %s: %v", want, got)
		}
	}
	if len(pages) < 2 {
		t.Errorf("%d tools on %d page(s): the go-sdk upstream pages by 3, so the merged list should page too", len(got), len(pages))
	}
	for _, up := range []string{"web", "old", "kid"} {
		if text := toolText(t, p.URL, up+"_echo", `{"text":"hi"}`); text != up+": hi" {
			t.Errorf("%s_echo answered %q", up, text)
		}
	}
	prompts := names(listAll(t, p.URL, "prompts/list"), "prompts")
	if !slices.Equal(prompts, []string{"kid_greet", "old_greet", "web_greet"}) {
		t.Errorf("prompts/list: %v", prompts)
	}
	for _, up := range []string{"web", "old", "kid"} {
		var g struct {
			Messages []struct {
				Content struct {
					Text     string         `json:"text"`
					Resource map[string]any `json:"resource"`
				} `json:"content"`
			} `json:"messages"`
		}
		post(t, p.URL, headers("prompts/get", up+"_greet"), rpcBody(1, "prompts/get", fmt.Sprintf(`"name":%q,"arguments":{"who":"ann"}`, up+"_greet"))).result(t, &g)
		if len(g.Messages) == 0 || g.Messages[0].Content.Text != "hello ann from "+up {
			t.Errorf("%s_greet: %+v", up, g)
		}
		if up != "old" && (len(g.Messages) < 2 || g.Messages[1].Content.Resource["uri"] != up+"+test://"+up+"/0") {
			t.Errorf("%s_greet's embedded resource is not namespaced: %+v", up, g)
		}
	}
}

// A tool whose x-mcp-header annotations are invalid is left out of the
// list, with a warning; the other tools of the page stay.
func TestInvalidToolAnnotationsLeftOut(t *testing.T) {
	up := serveHTTP(t, withBadTools(modernHandler(sdkToolServer("web", sdkOptions{}))))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("web", up.URL))
	got := names(listAll(t, p.URL, "tools/list"), "tools")
	for _, bad := range []string{"web_bad_number", "web_bad_space", "web_bad_twice"} {
		if slices.Contains(got, bad) {
			t.Errorf("%s was listed: %v", bad, got)
		}
	}
	if !slices.Contains(got, "web_echo") || !slices.Contains(got, "web_region") {
		t.Errorf("valid tools went missing: %v", got)
	}
	if n := strings.Count(p.Logs.String(), "invalid x-mcp-header"); n != 3 {
		t.Errorf("%d warnings about invalid annotations, want one per tool", n)
	}
}

// An unknown tool or prompt is -32602 naming it, with HTTP 400, whether its
// prefix names no upstream or the upstream has no such name.
func TestUnknownToolOrPrompt(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	for _, c := range []struct{ method, name string }{
		{"tools/call", "nosuch_echo"}, {"tools/call", "noprefix"}, {"tools/call", "web_nosuch"}, {"prompts/get", "kid_nosuch"}, {"prompts/get", "x_greet"},
	} {
		r := post(t, p.URL, headers(c.method, c.name), rpcBody(1, c.method, fmt.Sprintf(`"name":%q,"arguments":{}`, c.name)))
		r.wantError(t, 400, -32602)
		if r.Error != nil && !strings.Contains(r.Error.Message+string(r.Error.Data), strings.TrimPrefix(strings.TrimPrefix(c.name, "web_"), "kid_")) {
			t.Errorf("%s %s: the error does not name it: %s %s", c.method, c.name, r.Error.Message, r.Error.Data)
		}
	}
}

// A resource link and an embedded resource in a tool result carry
// namespaced URIs, and the link reads back through Manifold;
// structuredContent is the tool's own.
func TestToolResourceLinkReadsBack(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	for _, up := range []string{"web", "kid"} {
		var r callResult
		callTool(t, p.URL, up+"_link", `{}`).result(t, &r)
		if len(r.Content) != 2 || r.Content[0].URI != up+"+test://"+up+"/0" || r.Content[1].Resource["uri"] != up+"+test://"+up+"/1" {
			t.Fatalf("%s_link: %+v", up, r.Content)
		}
		if r.StructuredContent["uri"] != "test://"+up+"/0" {
			t.Errorf("structuredContent changed: %v", r.StructuredContent)
		}
		if text := readText(t, p.URL, r.Content[0].URI); text != up+" resource 0" {
			t.Errorf("reading back %s: %q", r.Content[0].URI, text)
		}
	}
}

// sseEvents posts body and returns every SSE data payload of the answer.
func sseEvents(t *testing.T, url string, h http.Header, body string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("answer is %s, not an event stream", ct)
	}
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("event %q: %v", d, err)
			}
			out = append(out, m)
		}
	}
	return out
}

// Progress of a tool call reaches the caller, with the caller's own token,
// ahead of the answer, from every kind of upstream.
func TestToolProgressFromEachKind(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	for _, up := range []string{"web", "old", "kid"} {
		meta := strings.Replace(metaOK, `"_meta":{`, `"_meta":{"progressToken":"tok-`+up+`",`, 1)
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"%s_progress","arguments":{},%s}}`, up, meta)
		evs := sseEvents(t, p.URL, headers("tools/call", up+"_progress"), body)
		progress := 0
		for _, ev := range evs[:max(len(evs)-1, 0)] {
			params, _ := ev["params"].(map[string]any)
			if ev["method"] != "notifications/progress" || params["progressToken"] != "tok-"+up {
				t.Errorf("%s: unexpected event %v", up, ev)
			}
			progress++
		}
		if progress != 3 || len(evs) == 0 || evs[len(evs)-1]["result"] == nil {
			t.Errorf("%s: %d progress events, last %v", up, progress, evs[len(evs)-1:])
		}
	}
}

// A caller that gives up cancels the upstream call: the tool's handler sees
// its context end, on every kind of upstream (a closed stream for a modern
// one, notifications/cancelled for the legacy and stdio ones). The modern
// HTTP upstream here is mcp-go: the go-sdk v1.8.0's stateless handler does
// not cancel a tool when its stream closes, whoever the client is.
func TestToolCancellationReachesUpstream(t *testing.T) {
	mod := serveHTTP(t, mcpgoToolServer("mod", true))
	old := serveHTTP(t, mcpgoToolServer("old", false))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("mod", mod.URL)+httpUpstreamYAML("old", old.URL)+childUpstream("kid", "sdk-tools:kid"))
	for _, up := range []string{"mod", "old", "kid"} {
		ctx, cancel := context.WithCancel(context.Background())
		body := rpcBody(1, "tools/call", `"name":"`+up+`_wait","arguments":{}`)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, strings.NewReader(body))
		req.Header = headers("tools/call", up+"_wait")
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		started := func() error {
			if events.get(events.started, up) == 0 && !strings.Contains(p.Logs.String(), "tool wait started on "+up) {
				return fmt.Errorf("%s_wait not started", up)
			}
			return nil
		}
		eventually(t, 10*time.Second, started)
		cancel()
		<-done
		eventually(t, 10*time.Second, func() error {
			if events.get(events.cancelled, up) == 0 && !strings.Contains(p.Logs.String(), "tool wait cancelled on "+up) {
				return fmt.Errorf("the %s upstream did not see the cancellation", up)
			}
			return nil
		})
	}
}

// An input_required result passes through, its requestState sealed for
// its caller (passstate_test.go); the retry with inputResponses and that
// requestState reaches the same upstream with its own, and nothing is
// cached.
func TestToolInputRequiredRoundTrip(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	before := events.get(events.calls, "web/ask")
	state := ""
	for i := 0; i < 2; i++ {
		var r callResult
		callTool(t, p.URL, "web_ask", `{}`).result(t, &r)
		if r.ResultType != "input_required" || !strings.HasPrefix(r.RequestState, "manifold.pass.") || r.InputRequests["q"] == nil {
			t.Fatalf("first answer %+v", r)
		}
		state = r.RequestState
	}
	retry := rpcBody(2, "tools/call", fmt.Sprintf(`"name":"web_ask","arguments":{},"requestState":%q,"inputResponses":{"q":{"action":"accept","content":{}}}`, state))
	var r callResult
	post(t, p.URL, headers("tools/call", "web_ask"), retry).result(t, &r)
	if r.ResultType != "complete" || r.Content[0].Text != "web: answered" {
		t.Errorf("retry answered %+v", r)
	}
	if n := events.get(events.calls, "web/ask") - before; n != 3 {
		t.Errorf("the upstream saw %d calls of ask, want 3 (nothing cached)", n)
	}
}

// allow and deny decide what is listed and callable; a filtered name is
// unknown.
func TestToolAndPromptFilters(t *testing.T) {
	web := serveHTTP(t, streamingSDK(sdkToolServer("web", sdkOptions{})))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("web", web.URL, `tools: {allow: ["e*", "l*", "progress"], deny: ["link"]}`, `prompts: {deny: ["*"]}`))
	if got := names(listAll(t, p.URL, "tools/list"), "tools"); !slices.Equal(got, []string{"web_echo", "web_progress"}) {
		t.Errorf("tools/list with filters: %v", got)
	}
	if got := names(listAll(t, p.URL, "prompts/list"), "prompts"); len(got) != 0 {
		t.Errorf("prompts/list with every prompt denied: %v", got)
	}
	callTool(t, p.URL, "web_link", `{}`).wantError(t, 400, -32602)
	callTool(t, p.URL, "web_wait", `{}`).wantError(t, 400, -32602)
	post(t, p.URL, headers("prompts/get", "web_greet"), rpcBody(1, "prompts/get", `"name":"web_greet"`)).wantError(t, 400, -32602)
	if text := toolText(t, p.URL, "web_echo", `{"text":"x"}`); text != "web: x" {
		t.Errorf("an allowed tool answered %q", text)
	}
}

// Tool lists are cached by their hints; an upstream's tools/list_changed
// invalidates them, and reaches a subscriber that asked for it.
func TestToolListCachedAndInvalidated(t *testing.T) {
	s := sdkToolServer("web", sdkOptions{ttlMs: 60_000, scope: "public"})
	up, _ := trackedModern(t, s)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("web", up.URL))
	listAll(t, p.URL, "tools/list")
	listAll(t, p.URL, "tools/list")
	if n := up.Calls.get("tools/list"); n != 1 {
		t.Fatalf("two lists within the ttl made %d upstream calls", n)
	}
	st := listen(t, p.URL, 5, `{"toolsListChanged":true,"promptsListChanged":true}`)
	ack := st.next(t, 5*time.Second)
	honoured, _ := ack["params"].(map[string]any)["notifications"].(map[string]any)
	if honoured["toolsListChanged"] != true || honoured["promptsListChanged"] != true {
		t.Fatalf("acknowledged %v", ack)
	}
	s.AddTool(&mcp.Tool{Name: "fresh", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("fresh"), nil
	})
	st.expect(t, 5, "notifications/tools/list_changed", "")
	if got := names(listAll(t, p.URL, "tools/list"), "tools"); !slices.Contains(got, "web_fresh") {
		t.Errorf("after list_changed, tools/list is still the old one: %v", got)
	}
	if n := up.Calls.get("tools/list"); n != 2 {
		t.Errorf("upstream tools/list calls %d, want 2", n)
	}
}

// Parameters annotated x-mcp-header must arrive mirrored in Mcp-Param-*
// headers that agree with the body (-32020 otherwise), and are sent on to
// the modern upstream, which checks them too.
func TestToolParamHeaders(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	body := rpcBody(1, "tools/call", `"name":"web_region","arguments":{"region":"eu west","n":7}`)
	h := headers("tools/call", "web_region")
	h.Set("Mcp-Param-Region", "eu west")
	h.Set("Mcp-Param-N", "7")
	var r callResult
	post(t, p.URL, h, body).result(t, &r)
	if len(r.Content) == 0 || r.Content[0].Text != "web: eu west" {
		t.Fatalf("a call with matching headers: %+v", r)
	}
	h.Set("Mcp-Param-Region", "=?base64?"+base64.StdEncoding.EncodeToString([]byte("eu west"))+"?=") // needless, but valid
	post(t, p.URL, h, body).result(t, &r)
	for _, mutate := range []func(http.Header){
		func(h http.Header) { h.Set("Mcp-Param-Region", "us") },            // mismatch
		func(h http.Header) { h.Del("Mcp-Param-Region") },                  // missing
		func(h http.Header) { h.Set("Mcp-Param-N", "8") },                  // integer mismatch
		func(h http.Header) { h.Set("Mcp-Param-Region", "=?base64?!!?=") }, // bad base64
	} {
		hh := h.Clone()
		mutate(hh)
		post(t, p.URL, hh, body).wantError(t, 400, -32020)
	}
	absent := rpcBody(1, "tools/call", `"name":"web_region","arguments":{"n":7}`)
	ha := headers("tools/call", "web_region")
	ha.Set("Mcp-Param-N", "7")
	ha.Set("Mcp-Param-Region", "eu")
	post(t, p.URL, ha, absent).wantError(t, 400, -32020)
}

// A tool call is bounded by call_timeout, not by the read timeout; the
// upstream is told (mcp-go cancels a tool whose stream closes).
func TestToolCallTimeout(t *testing.T) {
	mod := serveHTTP(t, mcpgoToolServer("slowmod", true))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("mod", mod.URL, "timeout: 200ms", "call_timeout: 1s"))
	start := time.Now()
	r := callTool(t, p.URL, "mod_wait", `{}`)
	took := time.Since(start)
	if r.Error == nil || r.Error.Code != -32603 || !strings.Contains(r.Error.Message, "timed out") {
		t.Fatalf("a tool past call_timeout answered %s", r.Body)
	}
	// Which timeout ended the call is a duration: at least call_timeout
	// (so not the 200 ms timeout), and a bounded wait past it.
	if took < time.Second || took > 5*time.Second {
		t.Errorf("the call took %v, want about call_timeout (1s), well past timeout (200ms)", took)
	}
	eventually(t, 5*time.Second, func() error {
		if events.get(events.cancelled, "slowmod") == 0 {
			return fmt.Errorf("the upstream tool was not cancelled")
		}
		return nil
	})
}

// Without namespaces names pass unchanged; a name two upstreams serve is
// listed and called from the first in configuration order, and the
// collision is logged once.
func TestToolNamesWithoutNamespace(t *testing.T) {
	web := serveHTTP(t, streamingSDK(sdkToolServer("web", sdkOptions{})))
	old := serveHTTP(t, mcpgoToolServer("old", false))
	p := startProxy(t, "namespace: none\nupstreams:"+httpUpstreamYAML("old", old.URL)+httpUpstreamYAML("web", web.URL))
	for i := 0; i < 2; i++ {
		got := names(listAll(t, p.URL, "tools/list"), "tools")
		if n := strings.Count(strings.Join(got, ","), "echo"); n != 1 || !slices.Contains(got, "link") {
			t.Fatalf("tools/list: %v", got)
		}
	}
	if text := toolText(t, p.URL, "echo", `{"text":"a"}`); text != "old: a" {
		t.Errorf("echo went to %q, want the first upstream (old)", text)
	}
	var r callResult
	callTool(t, p.URL, "link", `{}`).result(t, &r)
	if len(r.Content) == 0 || r.Content[0].URI != "test://web/0" {
		t.Errorf("link (web only, URIs unchanged): %+v", r.Content)
	}
	if n := strings.Count(p.Logs.String(), "two upstreams list the same identity; calls go to the first in configuration order\" id=echo"); n != 1 {
		t.Errorf("the collision of echo was logged %d times, want once:\n%s", n, p.Logs.String())
	}
}

// Completions route by their ref: a prompt by its namespaced name, a
// template by its namespaced URI.
func TestCompletionRoutedByRef(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	for ref, want := range map[string][]string{
		`{"type":"ref/prompt","name":"web_greet"}`:                  {"web-alice", "web-bob", "ref=greet"},
		`{"type":"ref/resource","uri":"kid+test://kid/items/{id}"}`: {"kid-alice", "kid-bob", "ref=test://kid/items/{id}"},
		`{"type":"ref/prompt","name":"kid_greet"}`:                  {"kid-alice", "kid-bob", "ref=greet"},
	} {
		var r struct {
			Completion struct {
				Values []string `json:"values"`
			} `json:"completion"`
		}
		post(t, p.URL, headers("completion/complete", ""), rpcBody(1, "completion/complete", `"ref":`+ref+`,"argument":{"name":"who","value":""}`)).result(t, &r)
		if !slices.Equal(r.Completion.Values, want) {
			t.Errorf("%s: %v", ref, r.Completion.Values)
		}
	}
	post(t, p.URL, headers("completion/complete", ""), rpcBody(1, "completion/complete", `"ref":{"type":"ref/prompt","name":"nosuch_greet"},"argument":{"name":"who","value":""}`)).wantError(t, 400, -32602)
}

// The official Go SDK client lists and calls tools and gets prompts through
// Manifold as from any MCP server.
func TestGoSDKClientToolsAndPrompts(t *testing.T) {
	p, _ := threeToolKinds(t, "")
	cs := sdkClient(t, p.URL, "")
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "old_echo", Arguments: map[string]any{"text": "sdk"}})
	if err != nil || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != "old: sdk" {
		t.Fatalf("CallTool: %v %+v", err, res)
	}
	g, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "kid_greet", Arguments: map[string]string{"who": "go"}})
	if err != nil || g.Messages[0].Content.(*mcp.TextContent).Text != "hello go from kid" {
		t.Fatalf("GetPrompt: %v %+v", err, g)
	}
	var listed []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, tool.Name)
	}
	if !slices.Contains(listed, "web_region") || !slices.Contains(listed, "kid_echo") {
		t.Errorf("the SDK client listed %v", listed)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "web_region", Arguments: map[string]any{"region": "é"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "web: é" {
		t.Errorf("CallTool with a mirrored non-ASCII param: %v %+v", err, res)
	}
}
