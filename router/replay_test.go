package router

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"weak"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
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
