// Command authclient is the client the MCP conformance suite's client
// auth scenarios run (`conformance client --command "authclient --manifold
// BIN" --scenario auth/NAME`): it plays an agent and its consenting user in
// front of a Manifold whose only upstream is the suite's protected server,
// so that Manifold is the OAuth client the suite checks.
//
// It writes Manifold's configuration for the scenario (oauth mode user, or
// client_credentials with the credentials the suite hands over in
// MCP_CONFORMANCE_CONTEXT), starts Manifold, and calls the suite's tool
// through it, twice. Each time Manifold answers input_required with a
// consent link, the "user" opens it headless, clicks through Manifold's
// page to the authorization URL (the suite's authorization server approves
// at once and redirects to Manifold's callback), and the call is retried
// with the user's accept. It stops
// Manifold and exits 0 when both calls completed, 1 otherwise.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// callerToken is the agent's token at Manifold: a static one, or (in the
// enterprise-managed scenario) the IdP's ID token that Manifold exchanges.
var callerToken = "conformance-caller-0123456789abcdef"

func main() {
	bin := flag.String("manifold", "manifold", "the manifold binary")
	logs := flag.String("logs", "", "where Manifold's log goes (default: a temporary file)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: authclient --manifold BIN SERVER_URL")
		os.Exit(2)
	}
	if err := run(*bin, *logs, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "authclient:", err)
		os.Exit(1)
	}
}

func run(bin, logs, server string) error {
	dir, err := os.MkdirTemp("", "authclient")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg, err := configFor(dir, base, server)
	if err != nil {
		return err
	}
	stop, err := startManifold(bin, cfg, logs, dir, base)
	if err != nil {
		return err
	}
	defer stop()
	c := &caller{url: base + "/mcp", http: &http.Client{Timeout: 20 * time.Second}}
	for i := 1; i <= 2; i++ {
		if err := c.useTool(i); err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
	}
	return nil
}

// suiteTool is the suite's tool in Manifold's prefix namespace; connectTool
// the tool Manifold lists in its place until the user consents.
const suiteTool, connectTool = "suite_test-tool", "suite_connect"

// useTool is what a host does: list the tools, call the suite's if listed,
// else the connect tool listed in its place, then list again and call it.
func (c *caller) useTool(round int) error {
	id := round * 10
	listed, err := c.listTools(id)
	if err != nil {
		return err
	}
	if !listed[suiteTool] {
		if !listed[connectTool] {
			return fmt.Errorf("tools/list shows neither %s nor %s", suiteTool, connectTool)
		}
		if err := c.callTool(id+1, connectTool); err != nil {
			return fmt.Errorf("%s: %w", connectTool, err)
		}
		if listed, err = c.listTools(id + 2); err != nil {
			return err
		}
		if !listed[suiteTool] {
			return fmt.Errorf("after the consent, tools/list does not show %s", suiteTool)
		}
	}
	return c.callTool(id+3, suiteTool)
}

// listTools lists the tools the caller is shown (one page: the suite's
// server has one tool).
func (c *caller) listTools(id int) (map[string]bool, error) {
	res, err := c.post(id, "tools/list", "", "")
	if err != nil {
		return nil, fmt.Errorf("tools/list: %w", err)
	}
	names := map[string]bool{}
	for _, t := range res.Tools {
		names[t.Name] = true
	}
	return names, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// configFor writes Manifold's configuration for the scenario the suite
// runs, and returns its path.
func configFor(dir, base, server string) (string, error) {
	var ctx struct {
		ClientID      string `json:"client_id"`
		ClientSecret  string `json:"client_secret"`
		PrivateKeyPEM string `json:"private_key_pem"`
		// auth/enterprise-managed-authorization: the organization's IdP
		// and the caller's ID token there; auth/wif-jwt-bearer: the
		// workload's JWT.
		IdPClientID      string `json:"idp_client_id"`
		IdPIDToken       string `json:"idp_id_token"`
		IdPTokenEndpoint string `json:"idp_token_endpoint"`
		ValidJWT         string `json:"valid_jwt"`
	}
	if raw := os.Getenv("MCP_CONFORMANCE_CONTEXT"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &ctx); err != nil {
			return "", fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
		}
	}
	oauth := "mode: user, client_metadata_url: \"https://conformance-test.local/client-metadata.json\""
	switch scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO"); {
	case strings.HasPrefix(scenario, "auth/client-credentials"):
		oauth = "mode: client_credentials"
	case scenario == "auth/wif-jwt-bearer":
		jwt := filepath.Join(dir, "workload.jwt")
		if err := os.WriteFile(jwt, []byte(ctx.ValidJWT), 0o600); err != nil {
			return "", err
		}
		oauth = fmt.Sprintf("mode: workload, assertion_file: %q", jwt)
	case scenario == "auth/enterprise-managed-authorization":
		oauth = fmt.Sprintf("mode: enterprise, idp: {token_endpoint: %q, client_id: %q}", ctx.IdPTokenEndpoint, ctx.IdPClientID)
		callerToken = ctx.IdPIDToken // admitted as a static token: the suite's IdP publishes no keys
	}
	if ctx.ClientID != "" {
		oauth += fmt.Sprintf(", client_id: %q", ctx.ClientID)
	}
	if ctx.ClientSecret != "" {
		oauth += fmt.Sprintf(", client_secret: %q", ctx.ClientSecret)
	}
	if ctx.PrivateKeyPEM != "" {
		key := filepath.Join(dir, "client-key.pem")
		if err := os.WriteFile(key, []byte(ctx.PrivateKeyPEM), 0o600); err != nil {
			return "", err
		}
		oauth += fmt.Sprintf(", private_key_file: %q", key)
	}
	yaml := fmt.Sprintf(`listen: %s
public_url: %s
state_dir: %s
log: {level: debug}
auth:
  bearer_tokens: [%s]
  authorization_servers: ["https://issuer.invalid"]
upstreams:
  - name: suite
    url: %s
    timeout: 15s
    oauth: {%s}
`, strings.TrimPrefix(base, "http://"), base, filepath.Join(dir, "state"), callerToken, server, oauth)
	path := filepath.Join(dir, "manifold.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o600)
}

// startManifold runs `manifold serve` on cfg until the returned stop, its
// log in a file (never the suite's pipes, which must close when this
// command ends).
func startManifold(bin, cfg, logs, dir, base string) (stop func(), err error) {
	if logs == "" {
		logs = filepath.Join(dir, "manifold.log")
	}
	f, err := os.Create(logs)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		f.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			return stop, nil
		}
	}
	stop()
	return nil, errors.New("manifold did not start")
}

// caller is the agent: a 2026-07-28 client of Manifold that declares URL
// elicitation, and whose user consents to what it is asked.
type caller struct {
	url  string
	http *http.Client
}

// maxRounds bounds the consents one call may ask for.
const maxRounds = 5

// callTool calls the tool name through Manifold, consenting when asked.
func (c *caller) callTool(id int, name string) error {
	extra := `,"arguments":{}`
	for round := 0; round < maxRounds; round++ {
		res, err := c.post(id, "tools/call", name, extra)
		if err != nil {
			return err
		}
		if res.ResultType != "input_required" {
			return nil
		}
		link, key, err := authorization(res)
		if err != nil {
			return err
		}
		if err := c.consent(link); err != nil {
			return err
		}
		extra = fmt.Sprintf(`,"arguments":{},"requestState":%q,"inputResponses":{%q:{"action":"accept"}}`, res.RequestState, key)
	}
	return fmt.Errorf("still asked for consent after %d rounds", maxRounds)
}

type result struct {
	ResultType    string                     `json:"resultType"`
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
	RequestState  string                     `json:"requestState"`
	Tools         []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// post sends method (of the tool name, if any) with extra params, and
// returns the result.
func (c *caller) post(id int, method, name, extra string) (*result, error) {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}},"io.modelcontextprotocol/clientInfo":{"name":"authclient","version":"1"}}`
	params := meta + extra
	if name != "" {
		params = fmt.Sprintf(`"name":%q,%s`, name, params)
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s}}`, id, method, params)
	req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Authorization": "Bearer " + callerToken} {
		req.Header.Set(k, v)
	}
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if i := bytes.LastIndex(b, []byte("data: ")); i >= 0 {
		b = b[i+6:]
	}
	var m struct {
		Result *result `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &m); err != nil {
		return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, b)
	}
	if m.Error != nil {
		return nil, fmt.Errorf("error %d: %s", m.Error.Code, m.Error.Message)
	}
	return m.Result, nil
}

// authorization finds the URL an input_required answer asks the user to
// open, and the key to answer it under.
func authorization(res *result) (link, key string, err error) {
	for k, raw := range res.InputRequests {
		var q struct {
			Method string `json:"method"`
			Params struct {
				Mode string `json:"mode"`
				URL  string `json:"url"`
			} `json:"params"`
		}
		if json.Unmarshal(raw, &q) == nil && q.Method == "elicitation/create" && q.Params.Mode == "url" {
			return q.Params.URL, k, nil
		}
	}
	return "", "", fmt.Errorf("input_required asks for no URL: %v", res.InputRequests)
}

// consent is the user: it opens the link, Manifold's page naming whom the
// authorization is for, clicks through (a POST of its form) to the
// authorization URL, which the suite's server approves at once, and
// follows its redirect to Manifold's callback, which must say the
// authorization went through.
func (c *caller) consent(link string) error {
	u, err := url.Parse(link)
	if err != nil {
		return fmt.Errorf("the link %q: %w", link, err)
	}
	resp, err := c.http.Get(link)
	if err != nil {
		return fmt.Errorf("opening the consent page: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the consent page answered HTTP %d", resp.StatusCode)
	}
	resp, err = c.http.PostForm(link, url.Values{"state": {u.Query().Get("state")}})
	if err != nil {
		return fmt.Errorf("going on to the authorization URL: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the authorization ended with HTTP %d at %s", resp.StatusCode, resp.Request.URL.Path)
	}
	return nil
}
