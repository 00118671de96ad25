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

// Changes moves for an upstream with each invalidation of it, each
// revalidation, and each flush; not for another upstream's.
func TestChanges(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	ctx := context.Background()
	a, b := c.Changes("a"), c.Changes("b")
	c.Invalidate(ctx, "a", mcp.TagToolLists)
	if c.Changes("a") == a || c.Changes("b") != b {
		t.Errorf("after invalidating a: a %d→%d, b %d→%d", a, c.Changes("a"), b, c.Changes("b"))
	}
	a = c.Changes("a")
	c.Revalidate(ctx, "a")
	if c.Changes("a") == a {
		t.Error("a revalidation changed nothing")
	}
	a, b = c.Changes("a"), c.Changes("b")
	c.missedMessages()
	if c.Changes("a") == a || c.Changes("b") == b {
		t.Error("lost messages changed nothing")
	}
}
