package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// childEnv makes the test binary a go-sdk stdio server (see TestMain).
const childEnv = "MANIFOLD_UPSTREAM_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := sdkServer().Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// sdkServer is a go-sdk server with resource test://pid, whose text is the
// serving process's pid.
func sdkServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "upstream-fixture", Version: "1"}, nil)
	s.AddResource(&sdk.Resource{URI: "test://pid", Name: "pid"}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "test://pid", Text: fmt.Sprint(os.Getpid())}}}, nil
	})
	return s
}

func modern(s *sdk.Server) http.Handler {
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
}

func legacy(s *sdk.Server) http.Handler {
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
}

func serve(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv.URL
}

func newUpstream(t *testing.T, o Options) *Upstream {
	t.Helper()
	o.Name = "up"
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	o.MaxResponseBytes = 1 << 20
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	u, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = u.Close(ctx)
	})
	return u
}

func readPID(ctx context.Context, u *Upstream) (string, error) {
	resp, err := u.Call(ctx, &mcp.Request{Method: mcp.MethodResourcesRead, Params: jsonrpc.Object{"uri": jsonrpc.Quote("test://pid")}, Meta: jsonrpc.Object{}})
	if err != nil {
		return "", err
	}
	if resp.Error != nil {
		return "", resp.Error
	}
	var r struct {
		ResultType string `json:"resultType"`
		Contents   []struct {
			Text string `json:"text"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(resp.Result, &r); err != nil || len(r.Contents) != 1 || r.ResultType != mcp.ResultTypeComplete {
		return "", fmt.Errorf("result %s: %v", resp.Result, err)
	}
	return r.Contents[0].Text, nil
}

// The era is learnt by probing: server/discover for a modern server, the
// initialize handshake (offering the newest legacy revision, accepting what
// the server chooses) otherwise; a pinned protocol is not probed.
func TestEraProbe(t *testing.T) {
	mcpgo := mcpgoserver.NewMCPServer("mcpgo", "1", mcpgoserver.WithResourceCapabilities(true, true))
	mcpgo.AddResource(mcpgoLegacyResource())
	for _, c := range []struct {
		name, url, pin string
		version        string
		modern         bool
	}{
		{"go-sdk stateless", serve(t, modern(sdkServer())), "", mcp.Version, true},
		{"go-sdk with sessions", serve(t, legacy(sdkServer())), "", mcp.Version20251125, false},
		{"mcp-go, both eras", serve(t, mcpgoserver.NewStreamableHTTPServer(mcpgo)), "", mcp.Version, true},
		{"mcp-go, legacy only", serve(t, mcpgoserver.NewStreamableHTTPServer(mcpgo, mcpgoserver.WithStreamableHTTPProtocolVersions(mcp.Legacy...))), "", mcp.Version20251125, false},
		{"mcp-go pinned to 2025-03-26", serve(t, mcpgoserver.NewStreamableHTTPServer(mcpgo)), mcp.Version20250326, mcp.Version20250326, false},
		{"pinned legacy on a modern server", serve(t, modern(sdkServer())), mcp.Version20250618, mcp.Version20250618, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, Options{URL: c.url, Protocol: c.pin})
			info, err := u.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.Version != c.version || info.Modern != c.modern {
				t.Fatalf("learnt %s (modern %v), want %s (modern %v)", info.Version, info.Modern, c.version, c.modern)
			}
			if _, err := readPID(context.Background(), u); err != nil {
				t.Fatalf("read after the probe: %v", err)
			}
		})
	}
}

func mcpgoLegacyResource() (mcpgo.Resource, mcpgoserver.ResourceHandlerFunc) {
	return mcpgo.NewResource("test://pid", "pid"), func(context.Context, mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: "test://pid", Text: "mcp-go"}}, nil
	}
}

// A server that stops speaking the era Manifold learnt (here, a modern
// server replaced by a session-based one) is probed again within the call,
// and the change is counted so cached translations are not reused.
func TestEraChangeRenegotiates(t *testing.T) {
	var h atomic.Pointer[http.Handler]
	m := modern(sdkServer())
	h.Store(&m)
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
	u := newUpstream(t, Options{URL: url})
	if _, err := readPID(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if u.EraChanges() != 0 {
		t.Fatalf("era changes %d before any change", u.EraChanges())
	}
	l := legacy(sdkServer())
	h.Store(&l)
	if _, err := readPID(context.Background(), u); err != nil {
		t.Fatalf("the first call after the change: %v", err)
	}
	info, _ := u.Info(context.Background())
	if info.Modern || u.EraChanges() != 1 {
		t.Errorf("after the change: modern %v, era changes %d", info.Modern, u.EraChanges())
	}
}

// Idempotent calls are retried on 429/502/503/504 up to the configured
// count; a call that is not idempotent is sent once; an exhausted retry is
// an unreachable upstream (stale-if-error may answer).
func TestRetries(t *testing.T) {
	var failures, reads, calls atomic.Int32
	inner := modern(sdkServer())
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Mcp-Method") {
		case mcp.MethodResourcesRead:
			reads.Add(1)
		case "tools/call":
			calls.Add(1)
		}
		if r.Header.Get("Mcp-Method") != mcp.MethodDiscover && failures.Add(-1) >= 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	u := newUpstream(t, Options{URL: url, Retries: 2})
	if _, err := u.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	failures.Store(2)
	if _, err := readPID(context.Background(), u); err != nil || reads.Load() != 3 {
		t.Fatalf("read after two 503s: %v, %d attempts (want 3)", err, reads.Load())
	}
	failures.Store(5)
	reads.Store(0)
	_, err := readPID(context.Background(), u)
	if err == nil || !Unreachable(err) || reads.Load() != 3 {
		t.Fatalf("read past the retries: err %v (unreachable %v), %d attempts", err, Unreachable(err), reads.Load())
	}
	failures.Store(1)
	_, err = u.Call(context.Background(), &mcp.Request{Method: "tools/call", Params: jsonrpc.Object{"name": jsonrpc.Quote("x")}, Meta: jsonrpc.Object{}})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 503 || calls.Load() != 1 {
		t.Fatalf("tools/call after a 503: %v, %d attempts (want 1)", err, calls.Load())
	}
}

// A stdio server that dies is started again (after a short backoff), and
// calls reach the new process; a call in flight when it dies fails as
// unreachable.
func TestStdioRestart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u := newUpstream(t, Options{Command: []string{exe, "-test.run=^$"}, Env: []string{childEnv + "=1"}})
	ctx := context.Background()
	first, err := readPID(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(first, &pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		second, err := readPID(ctx, u)
		if err == nil && second != first {
			break
		}
		if err != nil && !Unreachable(err) && !strings.Contains(err.Error(), "process") {
			t.Fatalf("a call while the process restarts: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new process within 10s (last: %q, %v)", second, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Unreachable is decided by the error's kind, explicitly: a dead process's
// closed pipe is unreachable; an arbitrary system error is not.
func TestUnreachableClassification(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("upstream x: tools/call: %w", err) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wrap(os.ErrClosed), true},
		{wrap(&os.PathError{Op: "write", Path: "|1", Err: os.ErrClosed}), true},
		{wrap(syscall.EPIPE), true},
		{wrap(syscall.ECONNREFUSED), true},
		{wrap(syscall.ECONNRESET), true},
		{wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{wrap(context.DeadlineExceeded), true},
		{wrap(errProcessExited), true},
		{wrap(&StatusError{Status: 503}), true},
		{wrap(syscall.EACCES), false},
		{wrap(syscall.EINVAL), false},
		{wrap(&StatusError{Status: 401}), false},
		{wrap(errors.New("malformed result")), false},
		{wrap(context.Canceled), false},
	} {
		if got := Unreachable(c.err); got != c.want {
			t.Errorf("Unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// While a stdio server that keeps dying waits to be restarted, a call
// fails at once as unreachable (so a stale answer can stand in), instead of
// waiting for the next start.
func TestStdioBackoffFailsFast(t *testing.T) {
	u := newUpstream(t, Options{Command: []string{"sh", "-c", "exit 1"}, Timeout: 10 * time.Second})
	time.Sleep(2500 * time.Millisecond) // a few exits: the backoff is now seconds long
	for i := 0; i < 3; i++ {
		start := time.Now()
		_, err := readPID(context.Background(), u)
		if took := time.Since(start); took > 500*time.Millisecond || err == nil || !Unreachable(err) {
			t.Fatalf("a call during restart backoff took %v and failed with %v (unreachable: %v)", took, err, Unreachable(err))
		}
	}
}

// Make before break: when the new subscription for a changed watch set
// cannot be opened, the healthy one stays open (no drop, no "missed"
// event), and the change is applied once the upstream accepts it.
func TestWatchKeepsHealthyStream(t *testing.T) {
	s := sdkServer()
	s.AddResource(&sdk.Resource{URI: "test://a", Name: "a"}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "test://a", Text: "a"}}}, nil
	})
	inner := modern(s)
	var refuse atomic.Bool
	var open atomic.Int32
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == mcp.MethodSubscriptions {
			if refuse.Load() {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			open.Add(1)
			defer open.Add(-1)
		}
		inner.ServeHTTP(w, r)
	}))
	var missed atomic.Int32
	u := newUpstream(t, Options{URL: url, OnEvent: func(_ string, ev Event) {
		if ev.Kind == Missed {
			missed.Add(1)
		}
	}})
	// A server that declares subscriptions: the go-sdk does once it has a
	// subscribe handler; sdkServer has none, so watch list changes only.
	u.StartWatching()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !u.WaitWatched(ctx, u.Watch([]string{"test://a"})) {
		t.Fatal("the first watch was not established")
	}
	refuse.Store(true)
	v := u.Watch([]string{"test://a", "test://b"})
	time.Sleep(500 * time.Millisecond)
	if open.Load() != 1 || missed.Load() != 0 {
		t.Fatalf("after a refused change: %d streams open, %d missed events; want the old stream kept and no miss", open.Load(), missed.Load())
	}
	refuse.Store(false)
	if !u.WaitWatched(ctx, v) {
		t.Fatal("the change was never applied")
	}
	if missed.Load() != 0 {
		t.Errorf("%d missed events", missed.Load())
	}
}
