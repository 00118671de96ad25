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

// changes counts the events after which what was learnt from cached
// answers may be out of date: per upstream, a revalidation; for all
// upstreams, a flush of the memory tier or messages possibly lost. (An
// invalidation of one tag is told by the tag's generation.) Counters only
// grow.
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

// Stamp marks a moment of an upstream's cached answers of one tag: two
// equal stamps mean nothing of them changed in between (no invalidation of
// the tag, no revalidation of the upstream, no flush), on this replica or
// reaching it from another. A stamp never repeats: its flushes only grow,
// and the tag's generation only grows between two flushes.
type Stamp struct{ flushes, revalidations, tag uint64 }

// Changes is the stamp of upstream's answers of tag now: what a caller
// learnt from them under one stamp is to be learnt again under another.
func (c *Cache) Changes(upstream, tag string) Stamp {
	return Stamp{c.changes.all.Load(), c.changes.of(upstream).Load(), c.gens.get(upstream + "\x00" + tagHash(tag))}
}
