package cache

import (
	"sync"
	"sync/atomic"
	"time"
)

// Policy is the operator's say over a request whose method the method
// table does not let the cache store (a tool call): with one, the request
// is looked up and filled like a read, its fill giving the answer the
// cache hints (ttlMs, cacheScope) it is to be stored under, and an answer
// that has none (an error, say) is passed on unstored. An entry of a
// Policy is never refreshed ahead of its expiry (that would call the
// upstream for nobody) and stands in for an unreachable upstream only when
// the Policy says so.
type Policy struct {
	// StaleIfError lets an expired entry stand in for an unreachable
	// upstream, as for reads (Options.StaleIfError).
	StaleIfError bool
}

// stale reports whether a stale entry may answer r.
func (r *Request) stale() bool { return r.Policy == nil || r.Policy.StaleIfError }

// aged tells r's Age hook how old the entry that answered is.
func (r *Request) aged(e *entry, now time.Time) {
	if r.Age != nil && e != nil {
		r.Age(max(now.Sub(e.filled), 0))
	}
}

// changes counts, per upstream, the events after which what was learnt
// from its cached answers may be out of date: an invalidation of any of
// its tags, a revalidation; and for all upstreams, a flush of the memory
// tier or messages possibly lost. Counters only grow.
type changes struct {
	all        atomic.Uint64
	byUpstream sync.Map // upstream name → *atomic.Uint64
}

func (c *changes) of(upstream string) *atomic.Uint64 {
	if n, ok := c.byUpstream.Load(upstream); ok {
		return n.(*atomic.Uint64)
	}
	n, _ := c.byUpstream.LoadOrStore(upstream, &atomic.Uint64{})
	return n.(*atomic.Uint64)
}

// Changes is a number that differs from any it was before once something
// of upstream's cached answers changed on this replica or reached it from
// another (an invalidation, a revalidation, a flush): what a caller learnt
// from those answers under one value is to be learnt again under another.
func (c *Cache) Changes(upstream string) uint64 {
	return c.changes.all.Load() + c.changes.of(upstream).Load()
}
