package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/upstream"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// listens tracks the subscriptions/listen streams a go-sdk upstream holds
// open, with the URIs each asks for.
type listens struct {
	mu   sync.Mutex
	open map[*http.Request][]string
}

func (l *listens) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") != mcp.MethodSubscriptions {
			next.ServeHTTP(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var m struct {
			Params struct {
				Notifications mcp.SubscriptionFilter `json:"notifications"`
			} `json:"params"`
		}
		_ = json.Unmarshal(b, &m)
		l.mu.Lock()
		l.open[r] = m.Params.Notifications.ResourceSubscriptions
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			delete(l.open, r)
			l.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// streams returns the URIs each open upstream stream carries.
func (l *listens) streams() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]string
	for _, uris := range l.open {
		out = append(out, uris)
	}
	return out
}

// watching counts the open upstream streams that carry uri.
func (l *listens) watching(uri string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, uris := range l.open {
		if slices.Contains(uris, uri) {
			n++
		}
	}
	return n
}

// invalidations records what the hub invalidated, and whether any
// subscriber had already been told when it did.
type invalidations struct {
	mu    sync.Mutex
	seen  []string
	early bool
	subs  []*Subscription
}

func (v *invalidations) Invalidate(_ context.Context, up, tag string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seen = append(v.seen, up+" "+tag)
	for _, s := range v.subs {
		if len(s.events) > 0 {
			v.early = true
		}
	}
}

func (v *invalidations) Revalidate(_ context.Context, up string) {
	v.Invalidate(context.Background(), up, "*")
}

type fixture struct {
	hub    *Hub
	server *sdk.Server
	l      *listens
	inv    *invalidations
}

// newFixture runs a go-sdk 2026-07-28 server with subscribable resources
// test://a and test://b (and what serve adds to it), a Manifold upstream
// client for it named "up", and a hub over it.
func newFixture(t *testing.T, o Options, serve ...func(*sdk.Server)) *fixture {
	s := sdk.NewServer(&sdk.Implementation{Name: "hub-fixture", Version: "1"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	for _, f := range serve {
		f(s)
	}
	for _, uri := range []string{"test://a", "test://b"} {
		s.AddResource(&sdk.Resource{URI: uri, Name: uri}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, Text: "x"}}}, nil
		})
	}
	l := &listens{open: map[*http.Request][]string{}}
	srv := httptest.NewServer(l.wrap(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var h *Hub
	u, err := upstream.New(upstream.Options{
		Name:    "up",
		Logger:  log,
		OnEvent: func(name string, ev upstream.Event) { h.OnEvent(name, ev) },
		Options: transport.Options{URL: srv.URL, Timeout: 5 * time.Second, MaxResponseBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	u.StartWatching()
	inv := &invalidations{}
	o.Upstreams, o.Namespace, o.Invalidator, o.Logger = upstream.NewRegistry([]*upstream.Upstream{u}), namespace.Namespace{Prefix: true}, inv, log
	h = New(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx)
		_ = u.Close(ctx)
		srv.CloseClientConnections()
		srv.Close()
	})
	return &fixture{hub: h, server: s, l: l, inv: inv}
}

func (f *fixture) subscribe(t *testing.T, uris ...string) *Subscription {
	t.Helper()
	s, err := f.hub.Subscribe(context.Background(), mcp.SubscriptionFilter{ResourcesListChanged: true, ResourceSubscriptions: uris})
	if err != nil {
		t.Fatal(err)
	}
	f.inv.mu.Lock()
	f.inv.subs = append(f.inv.subs, s)
	f.inv.mu.Unlock()
	t.Cleanup(s.Close)
	return s
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func next(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case ev := <-s.Events():
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return Event{}
	}
}

// Any number of subscribers of one URI cost the upstream one subscription
// of it; it is released when the last one leaves, not before.
func TestReferenceCounts(t *testing.T) {
	f := newFixture(t, Options{})
	a := f.subscribe(t, "up+test://a")
	// Subscribe returns once the upstream stream carries the URI.
	if n := f.l.watching("test://a"); n != 1 {
		t.Fatalf("after the first subscriber, %d upstream streams carry test://a, want 1", n)
	}
	b := f.subscribe(t, "up+test://a", "up+test://b")
	eventually(t, "one stream carrying both URIs", func() bool { return f.l.watching("test://a") == 1 && f.l.watching("test://b") == 1 })
	a.Close()
	// A third subscriber makes the hub hand the upstream its set again:
	// once one stream carries the new URI, it carries what a's leaving
	// left, which must still hold test://a for b.
	third := f.subscribe(t, "up+test://c")
	eventually(t, "one stream carrying test://c", func() bool { return len(f.l.streams()) == 1 && f.l.watching("test://c") == 1 })
	if got := f.l.streams()[0]; !slices.Contains(got, "test://a") || !slices.Contains(got, "test://b") {
		t.Fatalf("after a subscriber of test://a left, the upstream stream carries %v: test://a was released while a subscriber remained", got)
	}
	third.Close()
	b.Close()
	eventually(t, "test://a and test://b released", func() bool { return f.l.watching("test://a") == 0 && f.l.watching("test://b") == 0 })
	// A URI of an unknown upstream is not honoured; one of a known
	// upstream is, listed or not (the upstream decides what exists).
	c := f.subscribe(t, "nosuch+test://a", "up+test://zzz")
	defer c.Close()
	if got := c.Honoured.ResourceSubscriptions; !slices.Equal(got, []string{"up+test://zzz"}) || f.l.watching("test://zzz") != 1 {
		t.Errorf("honoured %v, upstream streams carrying test://zzz %d", got, f.l.watching("test://zzz"))
	}
}

// One upstream update reaches every subscriber of the URI, namespaced, and
// only them; the cache is invalidated before anyone is told.
func TestFanOut(t *testing.T) {
	f := newFixture(t, Options{})
	a, b, other := f.subscribe(t, "up+test://a"), f.subscribe(t, "up+test://a"), f.subscribe(t, "up+test://b")
	if err := f.server.ResourceUpdated(context.Background(), &sdk.ResourceUpdatedNotificationParams{URI: "test://a"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Subscription{a, b} {
		if ev := next(t, s); ev.URI != "up+test://a" || ev.List != nil {
			t.Errorf("event %+v, want the update of up+test://a", ev)
		}
	}
	select {
	case ev := <-other.Events():
		t.Errorf("a subscriber of test://b was told %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	f.inv.mu.Lock()
	defer f.inv.mu.Unlock()
	if !slices.Contains(f.inv.seen, "up test://a") || f.inv.early {
		t.Errorf("invalidations %v (a subscriber told first: %v)", f.inv.seen, f.inv.early)
	}
	if !slices.Equal([]string{"resourcesListChanged"}, honoured(a.Honoured)) {
		t.Errorf("honoured %+v", a.Honoured)
	}
}

func honoured(f mcp.SubscriptionFilter) []string {
	var out []string
	if f.ResourcesListChanged {
		out = append(out, "resourcesListChanged")
	}
	if f.ToolsListChanged {
		out = append(out, "toolsListChanged")
	}
	if f.PromptsListChanged {
		out = append(out, "promptsListChanged")
	}
	return out
}

// A subscriber that does not drain its queue is ended (ErrSlow), without
// holding up the others; a missed-changes event tells each subscriber of
// every list and URI it watches on that upstream.
func TestSlowSubscriberEnded(t *testing.T) {
	f := newFixture(t, Options{Queue: 2})
	slow, fast := f.subscribe(t, "up+test://a"), f.subscribe(t, "up+test://a")
	for i := 0; i < 3; i++ {
		f.hub.OnEvent("up", upstream.Event{Kind: upstream.ResourceUpdated, URI: "test://a"})
		next(t, fast)
	}
	select {
	case <-slow.Ended():
		if slow.Err() != ErrSlow {
			t.Errorf("ended with %v, want ErrSlow", slow.Err())
		}
	case <-time.After(time.Second):
		t.Fatal("a subscriber with a full queue was not ended")
	}
	if fast.Err() != nil {
		t.Fatalf("the fast subscriber was ended: %v", fast.Err())
	}
	f.hub.OnEvent("up", upstream.Event{Kind: upstream.Missed})
	lc, _ := mcp.ListChangeOf(mcp.NotifyResourcesChanged)
	if ev := next(t, fast); ev.List != lc {
		t.Errorf("first event after a miss %+v, want the resource list change", ev)
	}
	if ev := next(t, fast); ev.URI != "up+test://a" {
		t.Errorf("second event after a miss %+v, want up+test://a", ev)
	}
}

// The bound on subscriptions holds; a slot is freed by Close; shutdown
// ends every subscription with ErrClosing and waits for them to close.
func TestBoundAndShutdown(t *testing.T) {
	f := newFixture(t, Options{MaxStreams: 1})
	s := f.subscribe(t)
	if _, err := f.hub.Subscribe(context.Background(), mcp.SubscriptionFilter{}); err == nil {
		t.Fatal("a subscription past max_streams was accepted")
	}
	s.Close()
	s = f.subscribe(t)
	closed := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- f.hub.Close(ctx)
	}()
	<-s.Ended()
	if s.Err() != ErrClosing {
		t.Errorf("ended with %v, want ErrClosing", s.Err())
	}
	select {
	case <-closed:
		t.Fatal("Close returned with a subscription still open")
	case <-time.After(100 * time.Millisecond):
	}
	s.Close()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := f.hub.Subscribe(context.Background(), mcp.SubscriptionFilter{}); err == nil {
		t.Error("a subscription after shutdown was accepted")
	}
}

// MaxBytes bounds what open subscriptions hold together: one that would
// pass it is refused, saying so, and a closed one gives back its share.
func TestByteBound(t *testing.T) {
	long := "up+test://" + strings.Repeat("a", 4000)
	// One subscription of the long URI (4 KiB overhead, 4 × 4 KiB named, a
	// queue of 2 × 4 KiB) fits; two do not.
	f := newFixture(t, Options{MaxBytes: 40 << 10, Queue: 2})
	first := f.subscribe(t, long)
	_, err := f.hub.Subscribe(context.Background(), mcp.SubscriptionFilter{ResourceSubscriptions: []string{long}})
	if err == nil || !strings.Contains(err.Error(), "subscriptions.max_bytes") {
		t.Fatalf("a subscription past max_bytes: %v", err)
	}
	if _, err := f.hub.Subscribe(context.Background(), mcp.SubscriptionFilter{ResourceSubscriptions: []string{"up+test://b"}}); err != nil {
		t.Errorf("a small one beside it: %v", err)
	}
	first.Close()
	f.subscribe(t, long)
}

// The bound on subscriptions holds under concurrency: the slot is reserved
// where it is checked, so twenty concurrent subscribers against a bound of
// five get exactly five subscriptions.
func TestBoundUnderConcurrency(t *testing.T) {
	f := newFixture(t, Options{MaxStreams: 5})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var subs []*Subscription
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := f.hub.Subscribe(context.Background(), mcp.SubscriptionFilter{ResourceSubscriptions: []string{"up+test://a"}})
			if err == nil {
				mu.Lock()
				subs = append(subs, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, s := range subs {
		s.Close()
	}
	if len(subs) != 5 {
		t.Errorf("%d subscriptions past a bound of 5", len(subs))
	}
}

// The bounds are shared by every caller, so no one principal may hold
// more than a quarter of any of them: Alice, opening streams until she is
// refused, and naming resources until she is refused, leaves Bob room to
// subscribe, to new resources too. Resources she names in several streams
// count once. Callers who do not authenticate are bounded only together.
func TestPrincipalShare(t *testing.T) {
	f := newFixture(t, Options{MaxStreams: 12, MaxURIs: 2, MaxWatched: 8})
	as := func(who string) context.Context {
		return auth.WithPrincipal(context.Background(), &auth.Principal{ID: who})
	}
	var alices []*Subscription
	var refused error
	for i := 0; i < 12 && refused == nil; i++ {
		s, err := f.hub.Subscribe(as("alice"), mcp.SubscriptionFilter{ResourcesListChanged: true})
		if err != nil {
			refused = err
			break
		}
		alices = append(alices, s)
	}
	if len(alices) != 3 || refused == nil || !strings.Contains(refused.Error(), "subscriptions.max_streams") {
		t.Fatalf("alice opened %d of 12 streams (%v); want 3, a quarter, then refused naming the bound", len(alices), refused)
	}
	for _, a := range alices {
		a.Close()
	}
	uris := func(prefix string, from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("up+test://%s%d", prefix, i))
		}
		return out
	}
	subscribe := func(who string, named []string) (*Subscription, error) {
		s, err := f.hub.Subscribe(as(who), mcp.SubscriptionFilter{ResourceSubscriptions: named})
		if err == nil {
			t.Cleanup(s.Close)
		}
		return s, err
	}
	if _, err := subscribe("alice", uris("a", 0, 2)); err != nil {
		t.Fatalf("alice naming 2: %v", err)
	}
	if _, err := subscribe("alice", uris("a", 0, 2)); err != nil {
		t.Fatalf("alice naming the same 2 in another stream: %v", err)
	}
	if _, err := subscribe("alice", uris("a", 2, 3)); err == nil || !strings.Contains(err.Error(), "a quarter of what one upstream watches") {
		t.Fatalf("alice naming a third of up's 8 watched resources: %v; want refused, a quarter is 2", err)
	}
	if _, err := subscribe("bob", uris("b", 0, 2)); err != nil {
		t.Fatalf("bob, beside alice: %v", err)
	}
	anon := 0
	for i := 0; i < 4; i++ {
		if _, err := subscribe("", nil); err == nil {
			anon++
		}
	}
	if anon != 4 {
		t.Errorf("unauthenticated callers opened %d of 4 streams with room for 8", anon)
	}
}

// A stream lives no longer than the credential it was opened with: when
// the caller's token expires, the stream ends (ErrExpired), so its events
// stop and the caller must listen again with a fresh one. A stream opened
// without an expiring credential stays.
func TestStreamEndsWhenItsCredentialExpires(t *testing.T) {
	f := newFixture(t, Options{})
	expiring := auth.WithPrincipal(context.Background(), &auth.Principal{ID: "alice", Expires: time.Now().Add(300 * time.Millisecond)})
	s, err := f.hub.Subscribe(expiring, mcp.SubscriptionFilter{ResourcesListChanged: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	lasting := f.subscribe(t)
	select {
	case <-s.Ended():
		if s.Err() != ErrExpired {
			t.Errorf("the expired stream ended with %v, want ErrExpired", s.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stream outlived its caller's credential by 5 s")
	}
	select {
	case <-lasting.Ended():
		t.Errorf("a stream with no expiry ended: %v", lasting.Err())
	default:
	}
}

// At a search endpoint (upstream.View's Search) the tools list is two
// tools that never change: a change of the upstreams' tools, or a
// missed-changes event, tells its subscribers nothing of tools, and the
// rest as anywhere. The same subscription at /mcp hears the change.
func TestSearchViewHearsNoToolChanges(t *testing.T) {
	f := newFixture(t, Options{}, func(s *sdk.Server) {
		s.AddTool(&sdk.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	})
	filter := mcp.SubscriptionFilter{ToolsListChanged: true, ResourceSubscriptions: []string{"up+test://a"}}
	main, err := f.hub.Subscribe(context.Background(), filter)
	if err != nil {
		t.Fatal(err)
	}
	defer main.Close()
	search, err := f.hub.Subscribe(upstream.WithView(context.Background(), &upstream.View{Path: "/mcp/search", Search: true}), filter)
	if err != nil {
		t.Fatal(err)
	}
	defer search.Close()
	tools, _ := mcp.ListChangeOf(mcp.NotifyToolsChanged)
	f.hub.OnEvent("up", upstream.Event{Kind: upstream.ListChanged, List: tools})
	f.hub.OnEvent("up", upstream.Event{Kind: upstream.Missed})
	f.hub.OnEvent("up", upstream.Event{Kind: upstream.ResourceUpdated, URI: "test://a"})
	if ev := next(t, main); ev.List != tools {
		t.Errorf("at /mcp the first event is %+v, want the tools' list change", ev)
	}
	for ev := next(t, search); ev.URI != "up+test://a"; ev = next(t, search) {
		if ev.List == tools {
			t.Errorf("at the search endpoint the tools' list change was told")
		}
	}
}
