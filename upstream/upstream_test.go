package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/manifold-mcp/manifold/upstream/transport"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	if kind := os.Getenv(childEnv); kind != "" {
		s := sdkServer()
		if kind == "kid" {
			addKidTools(s)
		}
		if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
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

// eventually polls f until it holds, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !f(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
	}
}

func readPID(ctx context.Context, u *Upstream) (string, error) {
	resp, err := u.Call(ctx, &mcp.Request{Method: mcp.MethodResourcesRead, Params: jsonrpc.Object{"uri": jsonrpc.Quote("test://pid")}, Meta: jsonrpc.Object{}}, How{})
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
			u := newUpstream(t, Options{Protocol: c.pin, Options: transport.Options{URL: c.url}})
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
	u := newUpstream(t, Options{Options: transport.Options{URL: url}})
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
	u := newUpstream(t, Options{Options: transport.Options{URL: url, Retries: 2}})
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
	_, err = u.Call(context.Background(), &mcp.Request{Method: "tools/call", Params: jsonrpc.Object{"name": jsonrpc.Quote("x")}, Meta: jsonrpc.Object{}}, How{})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 503 || calls.Load() != 1 {
		t.Fatalf("tools/call after a 503: %v, %d attempts (want 1)", err, calls.Load())
	}
}

// A stdio server that dies is started again (after a short backoff), and
// calls reach the new process; a call in flight when it dies fails as
// unreachable.
func TestStdioRestart(t *testing.T) {
	u, first := stdioChild(t)
	ctx := context.Background()
	kill(t, first)
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

// stdioChild is an upstream whose server is this test binary as a go-sdk
// stdio child (TestMain), read once: it returns the child's pid as its
// test://pid read it.
func stdioChild(t *testing.T) (*Upstream, string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u := newUpstream(t, Options{Options: transport.Options{Command: []string{exe, "-test.run=^$"}, Env: []string{childEnv + "=1"}}})
	pid, err := readPID(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	return u, pid
}

// kill sends SIGKILL to the process of pid (as readPID reads it).
func kill(t *testing.T, pid string) {
	var n int
	fmt.Sscan(pid, &n)
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
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
		{wrap(transport.ErrProcessExited), true},
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
	// Each start of the child appends a line to a file: the test sees how
	// many times it was started, and whether a call waited for a start.
	log := filepath.Join(t.TempDir(), "starts")
	u := newUpstream(t, Options{Options: transport.Options{Command: []string{"sh", "-c", `echo >> "$0"; exit 1`, log}, Timeout: 10 * time.Second}})
	starts := func() int {
		b, _ := os.ReadFile(log)
		return bytes.Count(b, []byte("\n"))
	}
	// After five exits the backoff before the next start is 0.8 s or more
	// (100 ms doubling, with jitter of half either way): a call that
	// waited for that start would see one more line.
	eventually(t, 20*time.Second, "five starts of the child", func() bool { return starts() >= 5 })
	for i := 0; i < 3; i++ {
		before := starts()
		_, err := readPID(context.Background(), u)
		if after := starts(); after != before || err == nil || !Unreachable(err) {
			t.Fatalf("a call during restart backoff failed with %v (unreachable: %v); the child was started %d times meanwhile, want 0 (no waiting for the next start)",
				err, Unreachable(err), after-before)
		}
	}
}

// Make before break: when the new subscription for a changed watch set
// cannot be opened, the healthy one stays open (no drop, no "missed"
// event), and the change is applied once the upstream accepts it.
func TestWatchKeepsHealthyStream(t *testing.T) {
	// A server that declares resource subscriptions (the go-sdk does once
	// it has a subscribe handler), so that the watched URIs are part of
	// the stream's filter and a changed set needs a new stream.
	s := sdk.NewServer(&sdk.Implementation{Name: "upstream-fixture", Version: "1"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	s.AddResource(&sdk.Resource{URI: "test://a", Name: "a"}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "test://a", Text: "a"}}}, nil
	})
	inner := modern(s)
	var refuse atomic.Bool
	var open, refused atomic.Int32
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == mcp.MethodSubscriptions {
			if refuse.Load() {
				refused.Add(1)
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			open.Add(1)
			defer open.Add(-1)
		}
		inner.ServeHTTP(w, r)
	}))
	var missed atomic.Int32
	u := newUpstream(t, Options{
		OnEvent: func(_ string, ev Event) {
			if ev.Kind == Missed {
				missed.Add(1)
			}
		},
		Options: transport.Options{URL: url},
	})
	u.StartWatching()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !u.WaitWatched(ctx, u.Watch([]string{"test://a"})) {
		t.Fatal("the first watch was not established")
	}
	refuse.Store(true)
	v := u.Watch([]string{"test://a", "test://b"})
	// Two refusals: the second is the retry, so the first has been dealt
	// with (the old stream kept, or wrongly dropped) by then.
	eventually(t, 10*time.Second, "the refused change retried", func() bool { return refused.Load() >= 2 })
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

// heldStream serves a modern server whose subscriptions are slow to be
// opened, not refused, until release is called (or, legacyServer, a
// legacy server whose GET stream, which carries its notifications, is):
// no attempt fails, so only the calls made meanwhile can mark the gap.
// asked counts the attempts.
func heldStream(t *testing.T, legacyServer bool) (url string, release func(), asked *atomic.Int32) {
	srv, release, asked := heldServer(t, legacyServer)
	return srv.URL, release, asked
}

// heldServer is heldStream's server itself, for a test to cut or stop.
func heldServer(t *testing.T, legacyServer bool) (srv *httptest.Server, release func(), asked *atomic.Int32) {
	s := sdk.NewServer(&sdk.Implementation{Name: "upstream-fixture", Version: "1"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	s.AddResource(&sdk.Resource{URI: "test://a", Name: "a"}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "test://a", Text: "a"}}}, nil
	})
	inner, held := modern(s), func(r *http.Request) bool { return r.Header.Get("Mcp-Method") == mcp.MethodSubscriptions }
	if legacyServer {
		inner, held = legacy(s), func(r *http.Request) bool { return r.Method == http.MethodGet }
	}
	gate := make(chan struct{})
	asked = &atomic.Int32{}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if held(r) {
			asked.Add(1)
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	var once sync.Once
	return srv, func() { once.Do(func() { close(gate) }) }, asked
}

func readA(ctx context.Context, u *Upstream) error {
	_, err := u.Call(ctx, &mcp.Request{Method: mcp.MethodResourcesRead, Params: jsonrpc.Object{"uri": jsonrpc.Quote("test://a")}, Meta: jsonrpc.Object{}}, How{})
	return err
}

// A call answered while the first watch is still being opened may carry
// what changes before the watch is up, which no one would then tell: the
// first watch reports Missed after such a call, as a re-established one
// does (TestWatchKeepsHealthyStream: and only then).
func TestFirstWatchAfterACallReportsMissed(t *testing.T) {
	for _, legacyServer := range []bool{false, true} {
		t.Run(map[bool]string{false: "modern", true: "legacy GET stream"}[legacyServer], func(t *testing.T) {
			firstWatchAfterACall(t, legacyServer)
		})
	}
}

func firstWatchAfterACall(t *testing.T, legacyServer bool) {
	url, release, asked := heldStream(t, legacyServer)
	var missed atomic.Int32
	u := newUpstream(t, Options{
		OnEvent: func(_ string, ev Event) {
			if ev.Kind == Missed {
				missed.Add(1)
			}
		},
		Options: transport.Options{URL: url},
	})
	v := u.Watch([]string{"test://a"})
	u.StartWatching()
	eventually(t, 10*time.Second, "the first subscription asked for", func() bool { return asked.Load() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := readA(ctx, u); err != nil {
		t.Fatal(err)
	}
	release()
	if !u.WaitWatched(ctx, v) {
		t.Fatal("the first watch was not established")
	}
	eventually(t, 5*time.Second, "a missed event for the call answered before the watch", func() bool { return missed.Load() > 0 })
	// Calls after the watch is up are covered by it.
	if err := readA(ctx, u); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := missed.Load(); n != 1 || asked.Load() != 1 {
		t.Errorf("%d missed events over %d subscriptions; want 1 over 1", n, asked.Load())
	}
}

// With a timeout shorter than the first watch's wait, calls made while the
// watch is held are answered, and the upstream stays ready: the wait takes
// at most half of what a call has left.
func TestFirstWatchWaitKeepsShortTimeouts(t *testing.T) {
	url, release, asked := heldStream(t, false)
	defer release()
	u := newUpstream(t, Options{Options: transport.Options{URL: url, Timeout: 400 * time.Millisecond}})
	u.StartWatching()
	eventually(t, 10*time.Second, "the first subscription asked for", func() bool { return asked.Load() > 0 })
	for i := 0; i < 3; i++ {
		if err := readA(context.Background(), u); err != nil {
			t.Fatalf("read %d while the first watch is held: %v", i, err)
		}
	}
	if st := u.State(); st != Ready {
		t.Errorf("upstream %v after answered calls, want ready", st)
	}
}

// A sequence: the first watch comes up late (a call made before it: one
// Missed), then drops and comes back (a second), then the server goes away:
// calls fail as unreachable without waiting on a watch again.
func TestFirstWatchLateThenDropThenOutage(t *testing.T) {
	srv, release, asked := heldServer(t, false)
	var missed atomic.Int32
	u := newUpstream(t, Options{
		OnEvent: func(_ string, ev Event) {
			if ev.Kind == Missed {
				missed.Add(1)
			}
		},
		Options: transport.Options{URL: srv.URL, Timeout: 2 * time.Second},
	})
	u.StartWatching()
	eventually(t, 10*time.Second, "the first subscription asked for", func() bool { return asked.Load() > 0 })
	ctx := context.Background()
	if err := readA(ctx, u); err != nil {
		t.Fatal(err)
	}
	release()
	eventually(t, 5*time.Second, "the late first watch's missed event", func() bool { return missed.Load() == 1 })
	srv.CloseClientConnections() // the watch drops; it comes back
	eventually(t, 10*time.Second, "the re-established watch's missed event", func() bool { return missed.Load() == 2 })
	if err := readA(ctx, u); err != nil {
		t.Fatalf("a read after the watch came back: %v", err)
	}
	srv.CloseClientConnections()
	srv.Close()
	err := readA(ctx, u)
	if err == nil || !Unreachable(err) {
		t.Fatalf("a read with the server gone: %v (unreachable: %v)", err, Unreachable(err))
	}
	if n := missed.Load(); n != 2 {
		t.Errorf("%d missed events, want 2", n)
	}
}

// An upstream that moved within its origin is followed there (307 and
// 308 keep the POST and its body), every call, each sent first to the
// configured URL; one that redirects to another origin is refused, and
// the refusal names both.
func TestRedirects(t *testing.T) {
	var moved, served atomic.Int32
	inner := modern(sdkServer())
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		moved.Add(1)
		http.Redirect(w, r, "/new", http.StatusPermanentRedirect)
	})
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		inner.ServeHTTP(w, r)
	})
	base := serve(t, mux)
	u := newUpstream(t, Options{Options: transport.Options{URL: base + "/old"}})
	for i := range 3 {
		if pid, err := readPID(context.Background(), u); err != nil || pid != fmt.Sprint(os.Getpid()) {
			t.Fatalf("read %d through a same-origin redirect: %q, %v", i, pid, err)
		}
	}
	if moved.Load() < 3 || served.Load() < 3 {
		t.Errorf("%d redirects and %d served for 3 reads (and the probe)", moved.Load(), served.Load())
	}

	elsewhere := serve(t, inner)
	away := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere, http.StatusTemporaryRedirect)
	}))
	u = newUpstream(t, Options{Protocol: mcp.Version, Options: transport.Options{URL: away}})
	_, err := readPID(context.Background(), u)
	if err == nil || !strings.Contains(err.Error(), "refused a redirect") || !strings.Contains(err.Error(), strings.TrimPrefix(elsewhere, "http://")) {
		t.Fatalf("read redirected to another origin: %v, want it refused", err)
	}
}

// A POST answered with 301, 302 or 303 may have been served (303 says it
// was: "see the result there"), so it is never sent again: not to the same
// URL, and not turned into a GET of the Location as a browser would, which
// on an MCP endpoint opens a stream that is no answer to the call. Only 307
// and 308, which say the request was not served and is to be repeated as
// it was, are followed (TestRedirects). The call fails with the status and
// where it pointed (its query left out), so the operator can move the
// upstream's url.
func TestRedirectedPostIsSentOnce(t *testing.T) {
	inner := modern(sdkServer())
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther} {
		var reads atomic.Int32
		base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.Header.Get("Mcp-Method") == mcp.MethodResourcesRead {
				reads.Add(1)
				http.Redirect(w, r, "/result?sig=secret", status)
				return
			}
			inner.ServeHTTP(w, r)
		}))
		u := newUpstream(t, Options{Protocol: mcp.Version, Options: transport.Options{URL: base}})
		_, err := readPID(context.Background(), u)
		if n := reads.Load(); n != 1 {
			t.Errorf("%d: the read was posted %d times, want once", status, n)
		}
		var se *StatusError
		if !errors.As(err, &se) || se.Status != status || !strings.Contains(err.Error(), base+"/result") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%d: read answered %v, want the status and its Location without its query", status, err)
		}
	}
	// A 307, followed, then a 303 where it led: the client hands the 303
	// back rather than turn the call into a GET.
	var moved, gets atomic.Int32
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet:
			gets.Add(1)
			http.Error(w, "no", http.StatusMethodNotAllowed)
		case r.URL.Path == "/mcp" && r.Header.Get("Mcp-Method") == mcp.MethodResourcesRead:
			http.Redirect(w, r, "/moved", http.StatusTemporaryRedirect)
		case r.URL.Path == "/moved":
			moved.Add(1)
			http.Redirect(w, r, "/result", http.StatusSeeOther)
		default:
			inner.ServeHTTP(w, r)
		}
	}))
	u := newUpstream(t, Options{Protocol: mcp.Version, Options: transport.Options{URL: base + "/mcp"}})
	_, err := readPID(context.Background(), u)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusSeeOther || moved.Load() != 1 || gets.Load() != 0 {
		t.Errorf("307 then 303: %v, %d posts where it led, %d GETs; want the 303, one post, no GET", err, moved.Load(), gets.Load())
	}
}

// A child that dies ends the watch of it with the child's exit, not a bare
// "session gone": the watch and the supervisor learn of the death at the
// same moment, and whichever is recorded first is the failing episode's
// one line, which must say what happened to the process.
func TestStdioWatchEndsWithTheExit(t *testing.T) {
	u, first := stdioChild(t)
	ctx := context.Background()
	s, err := u.sessions.server(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A listen as the watch opens it (openListen): for the lists the
	// server says it can report changes of, which it keeps open.
	f, _ := u.w.filter(s)
	p := jsonrpc.Object{}
	if err := p.Set("notifications", f); err != nil {
		t.Fatal(err)
	}
	params := u.x.tr.params(ctx, s, &mcp.Request{Method: mcp.MethodSubscriptions, Params: p})
	listen := &transport.Exchange{Msg: jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: u.x.nextID(), Method: mcp.MethodSubscriptions, Params: params}, Version: s.Version, Gen: s.gen}
	// The child is killed only once both watch it: the listen
	// acknowledged, the stream opened.
	ended := map[string]chan error{"listen": make(chan error, 1), "stream": make(chan error, 1)}
	acked, opened := make(chan struct{}), make(chan struct{})
	var ack sync.Once
	go func() {
		ended["listen"] <- u.conn.Listen(ctx, listen, func(*jsonrpc.Message) { ack.Do(func() { close(acked) }) })
	}()
	go func() { ended["stream"] <- u.conn.Stream(ctx, s.ref(), func() { close(opened) }) }()
	for name, ready := range map[string]chan struct{}{"listen": acked, "stream": opened} {
		select {
		case <-ready:
		case err := <-ended[name]:
			t.Fatalf("the %s was not watching the child: %v", name, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s not watching the child after 10 s", name)
		}
	}
	kill(t, first)
	want := "process " + first + " exited (signal: killed)"
	for name, ch := range ended {
		select {
		case err := <-ch:
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, transport.ErrSessionGone) {
				t.Errorf("%s ended with %v; want a session gone naming %q", name, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still open 10 s after its child was killed", name)
		}
	}
}

// An HTTP+SSE stream that drops ends the watch of it with the stream's
// end, as the supervisor reports it, not a bare "session gone": either
// may be the failing episode's one logged line (as for a stdio child,
// TestStdioWatchEndsWithTheExit). In sequence: the stream cut (the watch
// names the end), a new stream (reads work again, on a new generation),
// then the server gone (reads fail as unreachable, and the new stream's
// watch names its own end).
func TestSSEWatchEndsWithTheStream(t *testing.T) {
	srv := httptest.NewServer(sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return sdkServer() }, nil))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	u := newUpstream(t, Options{Options: transport.Options{URL: srv.URL, Wire: WireSSE}})
	ctx := context.Background()
	if _, err := readPID(ctx, u); err != nil {
		t.Fatal(err)
	}
	first := watchSSEStream(t, u, srv.CloseClientConnections)
	eventually(t, 10*time.Second, "a read on a new stream", func() bool { _, err := readPID(ctx, u); return err == nil })
	second := watchSSEStream(t, u, func() {
		// No new connection first: a stream reopened meanwhile would hold
		// Close, which waits for the requests under way.
		srv.Listener.Close()
		srv.CloseClientConnections()
	})
	if second <= first {
		t.Errorf("the stream after the cut is generation %d, the cut one %d", second, first)
	}
	if _, err := readPID(ctx, u); err == nil || !Unreachable(err) {
		t.Errorf("a read with the server gone: %v, want it unreachable", err)
	}
}

// watchSSEStream watches u's current stream, ends it with end, and checks
// that the watch ended naming the stream's end; it returns the stream's
// generation.
func watchSSEStream(t *testing.T, u *Upstream, end func()) uint64 {
	t.Helper()
	s, err := u.sessions.server(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ended, watching := make(chan error, 1), make(chan struct{})
	go func() { ended <- u.conn.Stream(context.Background(), s.ref(), func() { close(watching) }) }()
	select {
	case <-watching:
	case err := <-ended:
		t.Fatalf("the stream of generation %d was not watched: %v", s.gen, err)
	}
	end()
	select {
	case err := <-ended:
		if want := fmt.Sprintf("SSE stream %d ended", s.gen); err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, transport.ErrSessionGone) {
			t.Errorf("the stream's watch ended with %v; want a session gone naming %q", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's watch still open 10 s after the stream was ended")
	}
	return s.gen
}
