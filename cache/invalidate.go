package cache

import (
	"context"
	"time"
)

// Invalidate makes every entry of (upstream, tag) unreachable, on this
// replica now and on the others as the message reaches them.
func (c *Cache) Invalidate(ctx context.Context, upstream, tag string) {
	c.invalidate(ctx, upstream, tagHash(tag))
}

// Revalidate is for when an upstream's changes may have been missed (its
// watch dropped and came back): every entry of it filled until now stops
// being fresh, here and on every replica, but stays usable for
// stale-if-error. Replicas that each saw the drop raise one shared time,
// by Redis's clock, rather than each wiping everything.
func (c *Cache) Revalidate(ctx context.Context, upstream string) {
	c.revalidated.Store(upstream, c.now())
	c.changes.of(upstream).Add(1)
	if c.redis != nil {
		c.redis.revalidate(ctx, upstream)
	}
	c.counters(upstream).invalidations.Add(1)
}

// revalidateBefore returns the time entries of upstream must be filled
// after to be fresh.
func (c *Cache) revalidateBefore(upstream string) time.Time {
	if t, ok := c.revalidated.Load(upstream); ok {
		return t.(time.Time)
	}
	return time.Time{}
}

func (c *Cache) invalidate(ctx context.Context, upstream, th string) {
	// Redis first: were memory raised first, a read on this replica in
	// between would find memory empty, fetch the old entry from Redis and
	// keep it in memory under the new generation. Raised this way round,
	// such a read misses in Redis and fills fresh. If Redis cannot be
	// reached, the upstream's shared entries are made stale on the next
	// contact (missed).
	if c.redis != nil {
		c.redis.invalidate(ctx, upstream, th)
	}
	c.raiseLocal(upstream, th)
	c.counters(upstream).invalidations.Add(1)
}

func (c *Cache) raiseLocal(upstream, th string) {
	c.gens.raise(upstream+"\x00"+th, 0) // a reset flushes memory first (generations.onReset)
}

func (c *Cache) applyRemote(inv invalidation) {
	switch {
	case inv.Upstream == "": // a replica of before, whose shared epoch moved
		c.missedMessages()
		return
	case inv.Revalidate:
		c.revalidated.Store(inv.Upstream, c.now())
		c.changes.of(inv.Upstream).Add(1)
		return
	}
	c.raiseLocal(inv.Upstream, inv.TagHash)
}

// missedMessages is for when invalidations may have been lost on the way
// to this replica: what memory holds stops being fresh, and stays for
// stale-if-error. (Redis entries are checked against Redis's own
// generations on every lookup, so they need nothing.)
func (c *Cache) missedMessages() {
	c.missedBefore.Store(c.now().UnixNano())
	c.changes.all.Add(1)
}

func (c *Cache) flushMemory() {
	if c.mem != nil {
		c.mem.flush()
	}
	c.changes.all.Add(1)
}
