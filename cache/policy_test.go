package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

func toolCall(args string, p *Policy) Request {
	return Request{Upstream: "up", Tag: mcp.TagToolResults, Policy: p, Req: &mcp.Request{
		Method: mcp.MethodToolsCall,
		Params: jsonrpc.Object{"name": json.RawMessage(`"search"`), "arguments": json.RawMessage(args)},
		Meta:   jsonrpc.Object{mcp.MetaProtocolVersion: json.RawMessage(`"2026-07-28"`)},
	}}
}

// A tool call passes the cache unless a Policy says it may be stored; one
// that may is stored for the ttlMs its fill gives it, told how old it is
// when it answers from an entry, never refreshed ahead, and stale only
// when the Policy allows it.
func TestPolicyMakesToolCallsCacheable(t *testing.T) {
	clk := newClock()
	o := testOptions("")
	o.Clock, o.Refresh = clk.now, RefreshAll
	c := newCache(t, o, nil)
	calls := 0
	var failing bool
	fill := func(ctx context.Context) (json.RawMessage, error) {
		calls++
		if failing {
			return nil, fmt.Errorf("down: %w", ErrUnreachable)
		}
		return json.RawMessage(fmt.Sprintf(`{"resultType":"complete","ttlMs":1000,"cacheScope":"public","content":[{"type":"text","text":"call %d"}]}`, calls)), nil
	}
	for range 2 {
		if _, err := c.Get(context.Background(), toolCall(`{"q":"a"}`, nil), fill); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 2 {
		t.Fatalf("without a Policy: %d fills, want 2", calls)
	}
	var ages []time.Duration
	r := toolCall(`{"q":"b"}`, &Policy{})
	r.Age = func(d time.Duration) { ages = append(ages, d) }
	get := func() (json.RawMessage, error) { return c.Get(context.Background(), r, fill) }
	first, _ := get()
	clk.advance(950 * time.Millisecond) // in the refresh window
	again, err := get()
	if err != nil || calls != 3 || !strings.Contains(string(again), "call 3") || !strings.Contains(string(first), "call 3") {
		t.Fatalf("with a Policy: %v, %d fills; %s then %s", err, calls, first, again)
	}
	if len(ages) != 1 || ages[0] != 950*time.Millisecond {
		t.Errorf("ages told: %v", ages)
	}
	c.refreshes.Wait()
	if calls != 3 {
		t.Errorf("an entry of a Policy was refreshed ahead: %d fills", calls)
	}
	clk.advance(100 * time.Millisecond) // expired, within stale_if_error
	failing = true
	if res, err := get(); err == nil {
		t.Errorf("a stale tool result stood in without StaleIfError: %s", res)
	}
	r.Policy = &Policy{StaleIfError: true}
	r.Req.Params["arguments"] = json.RawMessage(`{"q":"c"}`)
	failing = false
	get()
	clk.advance(1100 * time.Millisecond)
	failing = true
	if res, err := get(); err != nil || !json.Valid(res) {
		t.Errorf("StaleIfError: %v %s", err, res)
	}
}

// A stamp of one tag's answers moves with what can change them, and only
// that: an upstream's reads being invalidated leaves the stamp of its
// tool lists alone (the tool cache's read-only snapshot stays believed),
// its tool lists being invalidated, a revalidation or a flush move it.
func TestChangesPerTag(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	ctx := context.Background()
	s0 := c.Changes("up", mcp.TagToolLists)
	c.Invalidate(ctx, "up", mcp.TagOfNormal(mcp.NormalizeURI("test://doc")))
	c.Invalidate(ctx, "other", mcp.TagToolLists)
	if s := c.Changes("up", mcp.TagToolLists); s != s0 {
		t.Error("invalidating a read, or another upstream's tools, moved the stamp of up's tool lists")
	}
	seen := map[Stamp]bool{s0: true}
	for name, change := range map[string]func(){
		"invalidation": func() { c.Invalidate(ctx, "up", mcp.TagToolLists) },
		"revalidation": func() { c.Revalidate(ctx, "up") },
		"flush":        c.flushMemory,
		"lost message": c.missedMessages,
	} {
		change()
		s := c.Changes("up", mcp.TagToolLists)
		if seen[s] {
			t.Errorf("after a %s the stamp %v is one seen before", name, s)
		}
		seen[s] = true
	}
}
