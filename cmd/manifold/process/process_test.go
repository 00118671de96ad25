package process

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/redistest"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// childEnv makes the test binary a stdio MCP server (runChild): a real
// subprocess for the process to start and stop.
const childEnv = "MANIFOLD_PROCESS_TEST_CHILD"

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		if err := docServer(name, nil).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The OAuth grants of a Manifold without Redis are kept in the user's
	// state directory: these tests' in one of their own.
	dir, err := os.MkdirTemp("", "manifold-process-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_STATE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// docServer serves test://doc, whose text counts its reads (so a cached
// answer shows as an old count), cacheable for a minute, and test://pid,
// the server's process id.
func docServer(name string, reads *atomic.Int64) *mcp.Server {
	if reads == nil {
		reads = new(atomic.Int64)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 60_000, "public" },
	})
	text := func(uri, body string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: body}}}
	}
	s.AddResource(&mcp.Resource{URI: "test://doc", Name: "doc"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return text("test://doc", fmt.Sprintf("%s read %d", name, reads.Add(1))), nil
	})
	s.AddResource(&mcp.Resource{URI: "test://pid", Name: "pid"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return text("test://pid", strconv.Itoa(os.Getpid())), nil
	})
	return s
}

// httpUpstream serves docServer(name) over streamable HTTP until the test
// ends, and returns its URL and its count of reads.
func httpUpstream(t *testing.T, name string) (string, *atomic.Int64) {
	reads := new(atomic.Int64)
	s := docServer(name, reads)
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", reads
}

func httpYAML(name, url string, extra ...string) string {
	s := fmt.Sprintf("\n  - name: %s\n    url: %s\n", name, url)
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// running is a Process serving on a loopback port.
type running struct {
	p    *Process
	url  string // its /mcp
	file string // its configuration file
	stop func() error
}

// serve writes yamlText to a file, builds a Process from it and serves it
// until stop is called or the test ends.
func serve(t *testing.T, yamlText string) *running {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifold.yaml")
	if err := os.WriteFile(file, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l) }()
	var stopped error
	var once atomic.Bool
	r := &running{p: p, url: "http://" + l.Addr().String() + "/mcp", file: file, stop: func() error {
		if once.CompareAndSwap(false, true) {
			cancel()
			stopped = <-done
		}
		return stopped
	}}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// rewrite replaces the configuration file and reloads it.
func (r *running) rewrite(t *testing.T, yamlText string) error {
	t.Helper()
	if err := os.WriteFile(r.file, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	return r.p.Reload(context.Background())
}

// read reads uri through the process: its text, or the error's message.
func (r *running) read(t *testing.T, uri string) string {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":%q,"_meta":{`+
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"process-test","version":"1"}}}}`, uri)
	req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "resources/read", "Mcp-Name": uri} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	defer resp.Body.Close()
	var out struct {
		Result struct{ Contents []struct{ Text string } }
		Error  *struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("read %s: HTTP %d: %v", uri, resp.StatusCode, err)
	}
	if out.Error != nil {
		return "error: " + out.Error.Message
	}
	if len(out.Result.Contents) == 0 {
		t.Fatalf("read %s: no contents", uri)
	}
	return out.Result.Contents[0].Text
}

// New starts a stdio upstream's process, serves it, and stopping the
// process stops the child and the listener.
func TestNewServesAndStopStopsTheChild(t *testing.T) {
	yaml := fmt.Sprintf("upstreams:\n  - name: kid\n    command: [%q, \"-test.run=^$\"]\n    env: {%s: kid}\n", os.Args[0], childEnv)
	r := serve(t, yaml)
	if got := r.read(t, "kid+test://doc"); got != "kid read 1" {
		t.Fatalf("through the stdio upstream: %q", got)
	}
	pid, err := strconv.Atoi(r.read(t, "kid+test://pid"))
	if err != nil || pid == os.Getpid() {
		t.Fatalf("the child's pid: %d (%v)", pid, err)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("Serve after stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the stdio upstream's process %d outlived the stop", pid)
	}
	if _, err := http.Get(r.url); err == nil {
		t.Error("the listener still answers after the stop")
	}
}

// A reload that adds an upstream serves it and leaves the unchanged one as
// it was, its cached answers included; one that changes an upstream makes
// that upstream's answers stale.
func TestReloadKeepsTheCacheOfUnchangedUpstreams(t *testing.T) {
	aURL, aReads := httpUpstream(t, "a")
	bURL, _ := httpUpstream(t, "b")
	r := serve(t, "upstreams:"+httpYAML("a", aURL))
	if got := r.read(t, "a+test://doc"); got != "a read 1" {
		t.Fatalf("first read: %q", got)
	}
	if err := r.rewrite(t, "upstreams:"+httpYAML("a", aURL)+httpYAML("b", bURL)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := r.read(t, "b+test://doc"); got != "b read 1" {
		t.Errorf("the added upstream: %q", got)
	}
	if got := r.read(t, "a+test://doc"); got != "a read 1" || aReads.Load() != 1 {
		t.Errorf("after adding b, a's read: %q, %d upstream reads; want the cached answer", got, aReads.Load())
	}
	if err := r.rewrite(t, "upstreams:"+httpYAML("a", aURL, "timeout: 7s")+httpYAML("b", bURL)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	eventually(t, 5*time.Second, func() error { // a stale answer may be served while it is fetched again
		if r.read(t, "a+test://doc") == "a read 1" {
			return fmt.Errorf("a's answer was not fetched again after a changed: %d upstream reads", aReads.Load())
		}
		return nil
	})
}

// eventually waits for a condition (testwait.Eventually).
var eventually = testwait.Eventually

// A reload of a file that does not validate is refused, with every
// problem named, and the upstreams served go on as they were.
func TestBadReloadIsRefusedKeepingTheOldSet(t *testing.T) {
	aURL, _ := httpUpstream(t, "a")
	bURL, _ := httpUpstream(t, "b")
	r := serve(t, "upstreams:"+httpYAML("a", aURL))
	err := r.rewrite(t, "upstreams:"+httpYAML("b", bURL, "colour: blue"))
	if err == nil || !strings.Contains(err.Error(), "upstreams[0].colour") {
		t.Fatalf("reload of a bad file: %v, want the unknown key named", err)
	}
	if got := r.read(t, "a+test://doc"); got != "a read 1" {
		t.Errorf("a after the refused reload: %q", got)
	}
	if got := r.read(t, "b+test://doc"); !strings.HasPrefix(got, "error:") {
		t.Errorf("b of the refused file is served: %q", got)
	}
	if err := r.rewrite(t, "upstreams:"+httpYAML("a", aURL)+httpYAML("b", bURL)); err != nil {
		t.Fatalf("a good reload after the bad one: %v", err)
	}
	if got := r.read(t, "b+test://doc"); got != "b read 1" {
		t.Errorf("b after a good reload: %q", got)
	}
}

// A hung Redis costs a rate-limited request no more than cache.redis's
// timeout a command until the breakers open: it is not waited on for
// go-redis's own, longer, defaults.
func TestHungRedisCostsALimitedRequestItsTimeout(t *testing.T) {
	rs := redistest.Start(t)
	aURL, _ := httpUpstream(t, "a")
	r := serve(t, fmt.Sprintf("limits: {per_principal: {rate: 100, burst: 100}}\n"+
		"cache: {secret: process-test-secret-0123456789, redis: {url: %q, timeout: 100ms}}\nupstreams:", rs.URL())+httpYAML("a", aURL))
	if got := r.read(t, "a+test://doc"); got != "a read 1" {
		t.Fatalf("first read: %q", got)
	}
	rs.Pause()
	defer rs.Resume()
	for i := range 4 {
		start := time.Now()
		if got := r.read(t, "a+test://doc"); !strings.HasPrefix(got, "a read") {
			t.Errorf("read %d with Redis hung: %q", i, got)
		}
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Errorf("read %d with Redis hung took %v", i, took.Round(time.Millisecond))
		}
	}
}
