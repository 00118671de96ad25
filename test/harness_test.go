// Package test holds Manifold's integration tests: Manifold in front of real,
// independently written MCP servers (the official Go SDK, mcp-go, Manifold's
// own files server as a subprocess), driven by real clients (the Go SDK
// client) and by raw HTTP where the wire itself is the subject.
package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/cmd/manifold/process"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/redistest"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// manifoldBin is the manifold binary built once for the tests that need a
// real subprocess (the files upstream, the CLI, stdio mode); everythingBin
// is the go-sdk's conformance everything-server, the fixture the official
// suite is built around.
var manifoldBin, everythingBin string

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child))
	}
	dir, err := os.MkdirTemp("", "manifold-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	manifoldBin, everythingBin = filepath.Join(dir, "manifold"), filepath.Join(dir, "everything-server")
	// The OAuth grants of Manifolds without Redis are kept in the user's
	// state directory: the tests' in one of their own.
	os.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	for bin, pkg := range map[string]string{manifoldBin: "../cmd/manifold", everythingBin: "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logBuffer collects Manifold's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// proxy is a Manifold running in this process.
type proxy struct {
	URL     string // the /mcp endpoint
	Logs    *logBuffer
	handler http.Handler
	stop    func()
	srv     *process.Process
}

// startReloadable is startProxy with the configuration in a file, so that
// reload can change it and have the process read it again.
func startReloadable(t testing.TB, yamlText string) (p *proxy, reload func(yamlText string)) {
	t.Helper()
	path := writeConfig(t, yamlText)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p = startProxyConfig(t, cfg)
	return p, func(yamlText string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Reload(context.Background()); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
}

// startProxy parses yamlText (after the header a test does not care about)
// and serves it on a free loopback port until the test ends.
func startProxy(t testing.TB, yamlText string) *proxy {
	t.Helper()
	cfg, problems := config.Parse([]byte(yamlText), os.LookupEnv)
	if len(problems) > 0 {
		t.Fatalf("config problems: %v\n%s", problems, yamlText)
	}
	return startProxyConfig(t, cfg)
}

func startProxyConfig(t testing.TB, cfg *config.Config) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startProxyOn(t, cfg, l)
}

// startProxyOn is startProxyConfig on the listener l, for a configuration
// that must know its own address (public_url).
func startProxyOn(t testing.TB, cfg *config.Config, l net.Listener) *proxy {
	t.Helper()
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := process.New(cfg, log)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, l); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	p := &proxy{URL: "http://" + l.Addr().String() + "/mcp", Logs: logs, handler: srv.Handler(), srv: srv}
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(p.stop)
	return p
}

// testWriter sends log output to the test log when -v is on.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	}
	return len(p), nil
}

// rawResponse is an HTTP answer decoded as one JSON-RPC response.
type rawResponse struct {
	Status int
	Header http.Header
	Body   []byte
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

const metaOK = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw-test","version":"1"}}`

// rpcBody builds a request body; params is the params object without its
// braces, to which the standard _meta is appended.
func rpcBody(id int, method, params string) string {
	if params != "" {
		params += ","
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s%s}}`, id, method, params, metaOK)
}

// headers returns the headers a correct 2026-07-28 client sends for method,
// with Mcp-Name set to name when given.
func headers(method, name string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", "2026-07-28")
	h.Set("Mcp-Method", method)
	if name != "" {
		h.Set("Mcp-Name", name)
	}
	return h
}

// post sends one raw HTTP POST and decodes the answer (JSON or SSE).
func post(t testing.TB, url string, h http.Header, body string) *rawResponse {
	t.Helper()
	return do(t, http.MethodPost, url, h, body)
}

func do(t testing.TB, method, url string, h http.Header, body string) *rawResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if host := h.Get("Host"); host != "" {
		req.Host = host
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return decodeRaw(t, resp)
}

// decodeRaw reads a response whole, and its JSON-RPC message (the last
// event of an event stream) if it has one.
func decodeRaw(t testing.TB, resp *http.Response) *rawResponse {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	r := &rawResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}
	payload := b
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		payload = lastSSEData(b)
	}
	if len(bytes.TrimSpace(payload)) > 0 {
		if err := json.Unmarshal(payload, r); err != nil {
			t.Fatalf("decode %q: %v", b, err)
		}
	}
	return r
}

func lastSSEData(b []byte) []byte {
	var last []byte
	for _, line := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			last = []byte(d)
		}
	}
	return last
}

// result decodes r's result into v, failing the test on an error answer.
func (r *rawResponse) result(t testing.TB, v any) {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("unexpected error answer (HTTP %d): %s", r.Status, r.Body)
	}
	if err := json.Unmarshal(r.Result, v); err != nil {
		t.Fatalf("decode result %s: %v", r.Result, err)
	}
}

// wantError asserts an error answer with the given HTTP status and code.
func (r *rawResponse) wantError(t testing.TB, status int, code int64) {
	t.Helper()
	if r.Status != status || r.Error == nil || r.Error.Code != code {
		t.Fatalf("want HTTP %d with error %d, got HTTP %d: %s", status, code, r.Status, r.Body)
	}
}

// listResult is the shape of a merged list page.
type listResult struct {
	Resources         []map[string]any `json:"resources"`
	ResourceTemplates []map[string]any `json:"resourceTemplates"`
	Tools             []map[string]any `json:"tools"`
	Prompts           []map[string]any `json:"prompts"`
	NextCursor        string           `json:"nextCursor"`
	ResultType        string           `json:"resultType"`
	TTLms             *int64           `json:"ttlMs"`
	CacheScope        string           `json:"cacheScope"`
	Meta              map[string]any   `json:"_meta"`
}

type readResult struct {
	Contents []struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType"`
		Text     string `json:"text"`
		Blob     string `json:"blob"`
	} `json:"contents"`
	ResultType string         `json:"resultType"`
	TTLms      *int64         `json:"ttlMs"`
	CacheScope string         `json:"cacheScope"`
	Meta       map[string]any `json:"_meta"`
}

// listAll follows cursors through a merged list, returning every page.
func listAll(t testing.TB, url, method string) []listResult {
	t.Helper()
	return listAllAs(t, url, method, "")
}

func uris(pages []listResult) []string {
	var out []string
	for _, p := range pages {
		for _, r := range p.Resources {
			out = append(out, r["uri"].(string))
		}
	}
	return out
}

// eventually waits for a condition (testwait.Eventually).
var eventually = testwait.Eventually

// redisEntries waits until Redis holds n cache entries of scope (public or
// private): the proxy writes to Redis asynchronously, after answering. It
// reads the key layout, so it is for the benchmarks' setup, and for a test
// whose next read, on another replica, must find a private entry there: a
// user sees no sign of the write, and a read that comes before it fills
// again (a private fill's lease tells other replicas not to wait for it).
func redisEntries(t testing.TB, rs *redistest.Server, scope string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		keys, err := rs.Client().Keys(context.Background(), "*:"+scope+":*").Result()
		if err != nil || len(keys) != n {
			return fmt.Errorf("%d %s entries in redis (%v), want %d", len(keys), scope, err, n)
		}
		return nil
	})
}

// writeConfig writes a configuration file for a Manifold subprocess.
func writeConfig(t testing.TB, yamlText string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifold.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
