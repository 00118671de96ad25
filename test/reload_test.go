package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A reload (SIGHUP) that removes one upstream, adds another and changes a
// cache setting: the call under way on the removed upstream completes; the
// listen stream on the unchanged upstream stays open and is told of a
// change after the reload; the new upstream serves; the removed one is
// unknown, and a cursor naming it is refused naming it; the cache change
// is reported as needing a restart. Then an invalid file (POST /reload):
// 422 listing every problem, logged, counted, and the running
// configuration goes on serving.
func TestReload(t *testing.T) {
	h := sleepyServer()
	a, lt := trackedModern(t, h.Server)
	bee := newSDKServer("bee", sdkOptions{resources: 5, pageSize: 2})
	addSleepTool(bee)
	beeCalls := toolCalls(bee)
	b := modernSDK(t, bee)
	cee := newSDKServer("cee", sdkOptions{resources: 1})
	c := modernSDK(t, cee)
	first := "upstreams:" + httpUpstreamYAML("a", a.URL) + httpUpstreamYAML("b", b.URL)
	o := startOps(t, first)
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready", "b": "ready"})

	st := listen(t, o.MCP, 9, `{"resourceSubscriptions":["a+test://doc"]}`)
	st.next(t, 5*time.Second)
	lists := listen(t, o.MCP, 10, `{"resourcesListChanged":true}`)
	lists.next(t, 5*time.Second)
	eventually(t, 10*time.Second, func() error {
		if lt.watching("test://doc") == 0 {
			return fmt.Errorf("not watched upstream yet")
		}
		return nil
	})
	var page listResult
	post(t, o.MCP, headers("resources/list", ""), rpcBody(1, "resources/list", "")).result(t, &page)
	if page.NextCursor == "" {
		t.Fatal("no cursor on the first page")
	}
	slow := make(chan string, 1)
	go func() { slow <- toolTextRaw(o.MCP, "b_sleep", `{"ms":2000}`) }()
	select { // the call is under way
	case <-beeCalls:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached upstream b")
	}

	o.rewrite(t, "cache: {max_ttl: 30m}\nupstreams:"+httpUpstreamYAML("a", a.URL)+httpUpstreamYAML("c", c.URL))
	if err := o.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if o.logCount("configuration reloaded", "added=[c]", "removed=[b]", "unchanged=[a]") != 1 {
			return fmt.Errorf("not reloaded yet")
		}
		return nil
	})
	afterReload(t, o, h, st, page.NextCursor, slow)
	// A stream opened before the reload hears of the upstream it added.
	for drained := false; !drained; {
		select {
		case <-lists.events:
		case <-time.After(500 * time.Millisecond):
			drained = true
		}
	}
	cee.AddResource(&mcp.Resource{URI: "test://cee/new", Name: "new"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	lists.expect(t, 10, "notifications/resources/list_changed", "")
	invalidReload(t, o)
}

func afterReload(t *testing.T, o *opsProcess, h *hintedServer, st *sseStream, cursor string, slow chan string) {
	if got := <-slow; got != "slept 2000 ms" {
		t.Errorf("the call under way on the removed upstream: %q", got)
	}
	if got := readText(t, o.MCP, "c+test://cee/0"); got != "cee resource 0" {
		t.Errorf("the added upstream: %q", got)
	}
	post(t, o.MCP, headers("resources/read", "b+test://bee/0"), rpcBody(1, "resources/read", `"uri":"b+test://bee/0"`)).wantError(t, 400, -32602)
	r := post(t, o.MCP, headers("resources/list", ""), rpcBody(2, "resources/list", fmt.Sprintf(`"cursor":%q`, cursor)))
	r.wantError(t, 400, -32602)
	if !strings.Contains(r.Error.Message, "b") {
		t.Errorf("a cursor naming the removed upstream: %q does not say which", r.Error.Message)
	}
	updateUpstream(t, h.Server, "test://doc")
	st.expect(t, 9, "notifications/resources/updated", "a+test://doc")
	if o.logCount("take effect only after a restart", "cache") != 1 {
		t.Errorf("the changed cache setting was not reported:\n%s", o.Logs.String())
	}
	if n := o.logCount("upstream=a", "watch re-established"); n != 0 {
		t.Errorf("the unchanged upstream's watch was re-established %d times", n)
	}
	fams := scrapeFamilies(t, o.Admin+"/metrics")
	if v, _ := sample(fams, "manifold_config_reloads_total", "result", "success"); v != 1 {
		t.Errorf("successful reloads counted %v", v)
	}
}

func invalidReload(t *testing.T, o *opsProcess) {
	o.rewrite(t, "upstreams:\n  - name: c\n    url: ftp://nowhere\n    timeout: soon\n    colour: blue\n")
	code, body := fetch(t, http.MethodPost, o.Admin+"/reload", nil)
	if code != http.StatusUnprocessableEntity {
		t.Errorf("invalid reload: %d %s", code, body)
	}
	for _, want := range []string{"upstreams[0].colour: unknown key", "upstreams[0].timeout:", "upstreams[0].url: must be an absolute http"} {
		if !strings.Contains(body, want) {
			t.Errorf("invalid reload: %q missing from the answer:\n%s", want, body)
		}
		eventually(t, 5*time.Second, func() error {
			if o.logCount("reload refused", want) != 1 {
				return fmt.Errorf("%q missing from the log", want)
			}
			return nil
		})
	}
	fams := scrapeFamilies(t, o.Admin+"/metrics")
	if v, _ := sample(fams, "manifold_config_reloads_total", "result", "failure"); v != 1 {
		t.Errorf("failed reloads counted %v", v)
	}
	if got := readText(t, o.MCP, "c+test://cee/0"); got != "cee resource 0" {
		t.Errorf("after a refused reload: %q", got)
	}
}

// toolTextRaw calls a tool without a testing.T (for goroutines) and
// returns its first text, or the error.
func toolTextRaw(url, name, args string) string {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":%s`, name, args))))
	req.Header = headers("tools/call", name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var msg struct {
		Result struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		return err.Error()
	}
	if len(msg.Result.Content) == 0 {
		return string(msg.Error)
	}
	return msg.Result.Content[0].Text
}

// A host that signals its stdio server with SIGHUP reloads it; the session
// goes on.
func TestStdioSurvivesHangup(t *testing.T) {
	up := modernSDK(t, newHintedServer().Server)
	cfg := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams:"+httpUpstreamYAML("a", up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(manifoldBin, "stdio", "--config", cfg)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	logs := &logBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	ask := func(id int, method, params string) string {
		fmt.Fprintf(in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s}}`+"\n", id, method, params)
		if !lines.Scan() {
			t.Fatalf("no answer to %s; log:\n%s", method, logs.String())
		}
		return lines.Text()
	}
	ask(1, "initialize", `"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}`)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "configuration reloaded") {
			return fmt.Errorf("not reloaded yet")
		}
		return nil
	})
	if got := ask(2, "resources/read", `"uri":"a+test://pub/1"`); !strings.Contains(got, `"result"`) {
		t.Errorf("after SIGHUP: %s", got)
	}
}
