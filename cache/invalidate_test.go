package cache

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// raiseHook runs around the round trip that raises a tag's shared
// generation (an INCR pipeline): before, just before it is sent; after,
// once Redis has answered it.
type raiseHook struct{ before, after func() }

func (h raiseHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h raiseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h raiseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		raise := len(cmds) > 0 && cmds[0].Name() == "incr"
		if raise && h.before != nil {
			h.before()
		}
		err := next(ctx, cmds)
		if raise && h.after != nil {
			h.after()
		}
		return err
	}
}

// An invalidation raises the tag's generation in Redis and in this
// replica's memory, one after the other. A read on the same replica that
// falls between the two must not take the old entry from Redis into memory,
// where it would outlive the invalidation. The entry is in Redis only
// (another replica filled it); the read is made from a hook on the Redis
// client, once just before the shared raise and once just after it, so
// that, whichever of the two raises comes first, one of the reads falls
// between them. After the invalidation, the replica never serves the old
// entry.
func TestReadBetweenSharedAndLocalInvalidation(t *testing.T) {
	rs := redistest.Start(t)
	for _, at := range []string{"before the shared raise", "after the shared raise"} {
		t.Run(at, func(t *testing.T) {
			filler, c := newCache(t, testOptions(rs.URL()), nil), newCache(t, testOptions(rs.URL()), nil)
			up := &upstream{ttlMs: 60_000, scope: "public"}
			r := read("test://order/"+strings.ReplaceAll(at, " ", "-"), "")
			old, _, _ := get(t, filler, r, up.fill(r))
			filler.redis.pending.Wait() // the write to Redis is asynchronous
			if text, _, _ := get(t, newCache(t, testOptions(rs.URL()), nil), r, up.fill(r)); text != old {
				t.Fatalf("the entry is not in Redis: another replica read %q, want %q", text, old)
			}
			var inWindow atomic.Value
			window := func() {
				text, _, _ := get(t, c, r, up.fill(r))
				inWindow.Store(text)
			}
			hook := raiseHook{after: window}
			if at == "before the shared raise" {
				hook = raiseHook{before: window}
			}
			c.redis.rdb.AddHook(hook)
			c.Invalidate(context.Background(), "up", r.Tag)
			if inWindow.Load() == nil {
				t.Fatal("the hook never saw the shared raise")
			}
			c.redis.pending.Wait()
			if text, _, _ := get(t, c, r, up.fill(r)); text == old {
				t.Errorf("after the invalidation, the replica served the entry it invalidated, %q (read %s: %q)", text, at, inWindow.Load())
			}
		})
	}
}
