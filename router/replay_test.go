package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/upstream"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// shaped is the read of test://doc as the frontend hands the requests of
// one shape: sharing shape.
func shaped(shape *mcp.Shape) *mcp.Request {
	req := request("resources/read", `{"uri":"up+test://doc"}`)
	req.Shape = shape
	return req
}

// A replayed read the per-upstream limit refuses is no memory hit, as a
// read taking the full path is none: the hit ratio is what was served.
func TestReplayRefusedIsNoHit(t *testing.T) {
	r := allocRouter(t, true)
	var refuse atomic.Bool
	r.admit = func(context.Context, string) error {
		if refuse.Load() {
			return errors.New("limited")
		}
		return nil
	}
	shape := &mcp.Shape{}
	for i := 0; i < 3; i++ {
		if _, err := r.Handle(context.Background(), shaped(shape)); err != nil {
			t.Fatal(err)
		}
	}
	before := r.cache.Stats().Upstreams["up"].MemoryHits
	if before != 2 {
		t.Fatalf("%d memory hits after a fill and two replays, want 2", before)
	}
	refuse.Store(true)
	if _, err := r.Handle(context.Background(), shaped(shape)); err == nil {
		t.Fatal("a replayed read the limit refuses was answered")
	}
	if after := r.cache.Stats().Upstreams["up"].MemoryHits; after != before {
		t.Errorf("memory hits %d → %d over a refused read", before, after)
	}
}

// A plan made under a configured set lets it go when the set is swapped
// (a reload): the plan no longer stands, and keeps none of the old set's
// upstreams or memo alive.
func TestPlanKeepsNoOldSet(t *testing.T) {
	r := allocRouter(t, true)
	shape := &mcp.Shape{}
	if _, err := r.Handle(context.Background(), shaped(shape)); err != nil {
		t.Fatal(err)
	}
	if shape.Plan() == nil {
		t.Fatal("a cacheable read left no plan")
	}
	old := weak.Make(r.ups.Load())
	r.ups.Swap(upstream.NewSet(append([]*upstream.Upstream(nil), r.ups.Load().All()...)))
	for i := 0; i < 3 && old.Value() != nil; i++ {
		runtime.GC()
	}
	if old.Value() != nil {
		t.Error("the swapped-out set is still reachable through a shape's plan")
	}
	runtime.KeepAlive(shape)
	if _, err := r.Handle(context.Background(), shaped(shape)); err != nil {
		t.Fatal(err)
	}
}

// consentGate is an upstream's authorization as an OAuth client of mode
// user makes it: until granted, every request needs the caller's consent.
type consentGate struct {
	rt      http.RoundTripper
	granted *atomic.Bool
}

func (g consentGate) RoundTrip(req *http.Request) (*http.Response, error) {
	if !g.granted.Load() {
		return nil, &oauth.ConsentRequired{Upstream: "up", URL: "https://as.example/authorize?state=s"}
	}
	return g.rt.RoundTrip(req)
}

// consentRead is a read of test://doc by a caller that can be asked to
// open a URL, with extra params.
func consentRead(shape *mcp.Shape, extra string) *mcp.Request {
	raw := json.RawMessage(`{"uri":"up+test://doc"` + extra + `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}}`)
	p, _ := jsonrpc.ParseObject(raw)
	meta, _ := p.Object("_meta")
	delete(p, "_meta")
	return &mcp.Request{Method: "resources/read", Params: p, Meta: meta, Raw: raw, Shape: shape}
}

// A consent's retry is checked each time it comes (sealed for this caller,
// not expired, accepted by the user): its answer is never replayed from
// memory by the shape of its bytes, which would serve it past the
// consent's expiry. The request it resumes is not those bytes (the
// consent's members are cut), so it has no shape of its own.
func TestConsentRetryIsNotReplayed(t *testing.T) {
	defer func(ttl time.Duration) { consentTTL = ttl }(consentTTL)
	consentTTL = time.Second
	var granted atomic.Bool
	r := testRouterOf(t, upstream.Options{Options: transport.Options{URL: plainUpstream(t), Authorize: func(rt http.RoundTripper) http.RoundTripper { return consentGate{rt, &granted} }}},
		&cache.Options{MemoryBytes: 8 << 20, CredentialHeaders: []string{"Authorization"}})
	ctx := context.Background()
	asked, err := r.Handle(ctx, consentRead(nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	state, _ := jsonrpc.Member(asked, "requestState")
	if len(state) == 0 {
		t.Fatalf("not asked to consent: %s", asked)
	}
	granted.Store(true)
	retry := `,"requestState":` + string(state) + `,"inputResponses":{"manifold.authorize":{"action":"accept"}}`
	shape := &mcp.Shape{}
	for i := 0; i < 2; i++ {
		res, err := r.Handle(ctx, consentRead(shape, retry))
		if err != nil || !bytes.Contains(res, []byte(`"contents"`)) {
			t.Fatalf("retry %d within the consent's time: %s, %v", i, res, err)
		}
	}
	time.Sleep(consentTTL + 1100*time.Millisecond) // the expiry is in whole seconds
	res, err := r.Handle(ctx, consentRead(shape, retry))
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, "expired") {
		t.Errorf("the retry after the consent expired: %s, %v; want -32602, expired", res, err)
	}
}
