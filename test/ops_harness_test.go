package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// opsProcess is a real Manifold process with an admin listener, its
// configuration in a file a test may rewrite, and its log.
type opsProcess struct {
	MCP, Admin string // http://127.0.0.1:PORT (MCP is the /mcp endpoint)
	Config     string
	Logs       *logBuffer
	header     string
	cmd        *exec.Cmd
	exited     chan struct{}
}

// startOps runs `manifold serve` on yamlText, after a header with the two
// listeners (and pprof on), with env added to the environment, and
// TEST_PUBLIC_URL the MCP listener's address (for a public_url).
func startOps(t testing.TB, yamlText string, env ...string) *opsProcess {
	t.Helper()
	o := &opsProcess{Logs: &logBuffer{}, exited: make(chan struct{})}
	port, admin := freePort(t), freePort(t)
	o.header = fmt.Sprintf("listen: 127.0.0.1:%d\nadmin: {listen: 127.0.0.1:%d, pprof: true}\n", port, admin)
	o.MCP, o.Admin = fmt.Sprintf("http://127.0.0.1:%d/mcp", port), fmt.Sprintf("http://127.0.0.1:%d", admin)
	o.Config = filepath.Join(t.TempDir(), "manifold.yaml")
	o.rewrite(t, yamlText)
	o.cmd = exec.Command(manifoldBin, "serve", "--config", o.Config)
	o.cmd.Env = append(append(os.Environ(), fmt.Sprintf("TEST_PUBLIC_URL=http://127.0.0.1:%d", port)), env...)
	stderr, err := o.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(o.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(io.MultiWriter(o.Logs, testWriter{t}), sc.Text())
		}
		_ = o.cmd.Wait()
	}()
	t.Cleanup(func() { o.stop(t) })
	eventually(t, 15*time.Second, func() error {
		resp, err := http.Get(o.Admin + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return o
}

// rewrite replaces the configuration after the listeners' header.
func (o *opsProcess) rewrite(t testing.TB, yamlText string) {
	t.Helper()
	if err := os.WriteFile(o.Config, []byte(o.header+yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
}

// stop sends SIGTERM and waits for the process to exit.
func (o *opsProcess) stop(t testing.TB) {
	if o.cmd.Process == nil {
		return
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.exited:
	case <-time.After(20 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.exited
		t.Errorf("manifold did not stop within 20s of SIGTERM")
	}
}

// get fetches an admin path and returns its status and body.
func (o *opsProcess) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return fetch(t, http.MethodGet, o.Admin+path, nil)
}

func fetch(t *testing.T, method, url string, h http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if host := h.Get("Host"); host != "" {
		req.Host = host // the client sends req.Host, not a Host header
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// logCount counts the log lines containing every one of parts.
func (o *opsProcess) logCount(parts ...string) int {
	n := 0
	for _, line := range strings.Split(o.Logs.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// switchable is an upstream that can be taken down and brought back on
// the same address: down, it cuts every connection (open streams too) and
// accepts none, as a crashed server behind a live port would not; so it
// closes its listener and reopens it on the same port.
type switchable struct {
	t       *testing.T
	handler http.Handler
	addr    string
	srv     atomic.Pointer[httptest.Server]
}

func newSwitchable(t *testing.T, h http.Handler) *switchable {
	s := &switchable{t: t, handler: h}
	srv := httptest.NewServer(h)
	s.addr = srv.Listener.Addr().String()
	s.srv.Store(srv)
	t.Cleanup(func() {
		if srv := s.srv.Load(); srv != nil {
			srv.Close()
		}
	})
	return s
}

// URL is the /mcp endpoint.
func (s *switchable) URL() string { return "http://" + s.addr + "/mcp" }

func (s *switchable) down() {
	if srv := s.srv.Swap(nil); srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

func (s *switchable) up() {
	var l net.Listener
	eventually(s.t, 5*time.Second, func() (err error) { // the port may linger a moment
		l, err = net.Listen("tcp", s.addr)
		return err
	})
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: s.handler}}
	srv.Start()
	s.srv.Store(srv)
}

// sleepyServer is a hintedServer with the tool of addSleepTool.
func sleepyServer() *hintedServer {
	h := newHintedServer()
	addSleepTool(h.Server)
	return h
}

// toolCalls signals each tools/call s receives, as it starts: a test waits
// on it for "the call is under way".
func toolCalls(s *mcp.Server) <-chan struct{} {
	calls := make(chan struct{}, 16)
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				select {
				case calls <- struct{}{}:
				default:
				}
			}
			return next(ctx, method, req)
		}
	})
	return calls
}

// addSleepTool adds a tool "sleep" that answers after ms milliseconds.
func addSleepTool(s *mcp.Server) {
	type args struct {
		MS int `json:"ms"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "sleep"}, func(ctx context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		select {
		case <-time.After(time.Duration(a.MS) * time.Millisecond):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("slept %d ms", a.MS)}}}, nil, nil
	})
}
