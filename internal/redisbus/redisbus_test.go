package redisbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/redisbus"
	"github.com/manifold-mcp/manifold/internal/redistest"
)

// After a Sentinel failover the old master may keep its subscribers for
// seconds; the bus moves to the new master at once, says that messages may
// have been lost, and hears what is published there.
func TestListenFollowsSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	opts := &redis.UniversalOptions{Addrs: []string{s.Addr}, MasterName: s.MasterName}
	rdb := redis.NewUniversalClient(opts)
	defer rdb.Close()
	bus := redisbus.Bus{Client: rdb, Options: opts, Channel: "test"}

	got, lost := make(chan string, 16), make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Listen(ctx, func(p string) { got <- p }, func() { lost <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()

	publishUntilHeard(t, rdb, got, "before")
	s.Failover()
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("no loss reported after the failover")
	}
	publishUntilHeard(t, rdb, got, "after")
}

// publishUntilHeard publishes msg until the bus delivers it (a subscription
// is confirmed asynchronously), for at most 5 s.
func publishUntilHeard(t *testing.T, rdb redis.UniversalClient, got chan string, msg string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_ = rdb.Publish(context.Background(), "test", msg).Err()
		select {
		case p := <-got:
			if p == msg {
				return
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("%q was never delivered", msg)
}
