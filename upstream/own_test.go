package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// bearerOfCaller is an OAuth client of mode user as the upstream sees it:
// each request goes with its caller's own token, "tok-" and the principal.
type bearerOfCaller struct{ rt http.RoundTripper }

func (b bearerOfCaller) RoundTrip(req *http.Request) (*http.Response, error) {
	p := auth.From(req.Context())
	if p == nil {
		return nil, fmt.Errorf("no caller")
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer tok-"+p.ID)
	return b.rt.RoundTrip(r)
}

func asPrincipal(id string) context.Context {
	return auth.WithPrincipal(context.Background(), &auth.Principal{ID: id})
}

// A legacy server that binds each session to the user whose token opened
// it (the go-sdk's bearer check: another user's request in it is 403) is
// called by every principal in a session of its own. As many principals
// as call are served, every one as itself; the sessions kept are bounded
// (maxOwnSessions), the least recently used ended at the server (DELETE)
// as others come, and its principal served again in a new one; memory
// does not grow with the principals beyond the bound.
func TestOwnSessionsAreBounded(t *testing.T) {
	var deletes atomic.Int64
	verify := func(_ context.Context, tok string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		return &sdkauth.TokenInfo{UserID: strings.TrimPrefix(tok, "tok-"), Expiration: time.Now().Add(time.Hour)}, nil
	}
	bound := sdkauth.RequireBearerToken(verify, nil)(legacy(sdkServer()))
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
		}
		bound.ServeHTTP(w, r)
	}))
	u := newUpstream(t, Options{Options: transport.Options{URL: base, PerPrincipal: true, Authorize: func(rt http.RoundTripper) http.RoundTripper { return bearerOfCaller{rt} }}})
	read := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := readPID(asPrincipal(fmt.Sprintf("user-%d", i)), u); err != nil {
				t.Fatalf("user-%d: %v", i, err)
			}
		}
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	read(0, 2*maxOwnSessions)
	before := heap()
	read(2*maxOwnSessions, 8*maxOwnSessions)
	after := heap()
	u.sessions.pool.mu.Lock()
	kept := u.sessions.pool.owned
	u.sessions.pool.mu.Unlock()
	if kept > maxOwnSessions {
		t.Errorf("%d sessions kept for %d principals, bound %d", kept, 8*maxOwnSessions, maxOwnSessions)
	}
	ended := int64(8*maxOwnSessions - 1 - maxOwnSessions)
	for deadline := time.Now().Add(10 * time.Second); deletes.Load() < ended && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := deletes.Load(); n < ended {
		t.Errorf("%d sessions ended at the server, want %d: the rest are left open there", n, ended)
	}
	t.Logf("heap %d → %d bytes over %d more principals", before, after, 6*maxOwnSessions)
	if after > before+2<<20 {
		t.Errorf("heap grew %d bytes over %d more principals", after-before, 6*maxOwnSessions)
	}
	read(0, 1) // the first, its session ended long ago: served in a new one
}

// A fault sequence for sessions of their own: the server restarts and
// forgets every session (each principal's next call opens another, the
// negotiating one's and the others' alike), then is down (calls fail as
// unreachable), then is back (each principal served as itself again).
func TestOwnSessionsRestartOutageRecovery(t *testing.T) {
	verify := func(_ context.Context, tok string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		return &sdkauth.TokenInfo{UserID: strings.TrimPrefix(tok, "tok-"), Expiration: time.Now().Add(time.Hour)}, nil
	}
	var servers []*sdk.Server
	fresh := func() http.Handler {
		srv := sdkServer()
		servers = append(servers, srv)
		return sdkauth.RequireBearerToken(verify, nil)(legacy(srv))
	}
	var current atomic.Pointer[http.Handler]
	up := func(h http.Handler) { current.Store(&h) }
	up(fresh())
	t.Cleanup(func() { // what a restart would have ended
		for _, srv := range servers {
			for ss := range srv.Sessions() {
				ss.Close()
			}
		}
	})
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) }))
	u := newUpstream(t, Options{Options: transport.Options{URL: base, PerPrincipal: true, Authorize: func(rt http.RoundTripper) http.RoundTripper { return bearerOfCaller{rt} }}})
	users := []string{"alice", "bob", "carol"}
	all := func(step string) {
		t.Helper()
		for _, who := range users {
			if _, err := readPID(asPrincipal(who), u); err != nil {
				t.Fatalf("%s, %s: %v", step, who, err)
			}
		}
	}
	all("first")
	up(fresh()) // a restart: every session forgotten
	all("after the restart")
	up(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) }))
	for _, who := range users {
		if _, err := readPID(asPrincipal(who), u); err == nil || !Unreachable(err) {
			t.Fatalf("during the outage, %s: %v, want unreachable", who, err)
		}
	}
	up(fresh())
	all("after the outage")
}

// A session is never ended under a call: Bob's tool call is under way in
// his session when more principals than the bound call, each opening its
// own; Bob's, the least recently used, is the one the bound would end, but
// it stays until his call is over, and the call is answered.
func TestOwnSessionInUseIsNotEnded(t *testing.T) {
	verify := func(_ context.Context, tok string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		return &sdkauth.TokenInfo{UserID: strings.TrimPrefix(tok, "tok-"), Expiration: time.Now().Add(time.Hour)}, nil
	}
	srv := sdkServer()
	started, release := make(chan struct{}), make(chan struct{})
	srv.AddTool(&sdk.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		close(started)
		select {
		case <-release:
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	bound := sdkauth.RequireBearerToken(verify, nil)(legacy(srv))
	var mu sync.Mutex
	var bobs string
	deleted := map[string]bool{}
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		switch {
		case r.Method == http.MethodDelete:
			deleted[r.Header.Get("Mcp-Session-Id")] = true
		case r.Header.Get("Authorization") == "Bearer tok-bob" && bobs == "":
			bobs = r.Header.Get("Mcp-Session-Id")
		}
		mu.Unlock()
		bound.ServeHTTP(w, r)
	}))
	u := newUpstream(t, Options{Options: transport.Options{URL: base, PerPrincipal: true, Authorize: func(rt http.RoundTripper) http.RoundTripper { return bearerOfCaller{rt} }}})
	if _, err := readPID(asPrincipal("alice"), u); err != nil { // the negotiation, as alice
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := u.Call(asPrincipal("bob"), &mcp.Request{Method: mcp.MethodToolsCall, Params: jsonrpc.Object{"name": jsonrpc.Quote("wait"), "arguments": json.RawMessage(`{}`)}, Meta: jsonrpc.Object{}}, How{})
		if err == nil && resp.Error != nil {
			err = resp.Error
		}
		answered <- err
	}()
	<-started
	for i := range maxOwnSessions + 8 {
		if _, err := readPID(asPrincipal(fmt.Sprintf("user-%d", i)), u); err != nil {
			t.Fatalf("user-%d: %v", i, err)
		}
	}
	mu.Lock()
	cut := bobs != "" && deleted[bobs]
	mu.Unlock()
	if cut {
		t.Error("bob's session was ended while his call was in it")
	}
	close(release)
	if err := <-answered; err != nil {
		t.Errorf("bob's call: %v", err)
	}
}
