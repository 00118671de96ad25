package cache

import (
	"fmt"
)

// Stats is a snapshot of the cache's counters, for metrics, the admin page
// and the shutdown summary. Counters only grow; a reader computes rates.
type Stats struct {
	Upstreams map[string]UpstreamStats
	// Evictions counts memory-tier entries dropped to make room.
	Evictions uint64
	// Redis is nil without a shared tier.
	Redis *RedisStats
}

// UpstreamStats counts one upstream's lookups.
type UpstreamStats struct {
	MemoryHits, RedisHits uint64
	Misses                uint64 // found in no tier
	Fills                 uint64 // upstream calls made for misses
	Coalesced             uint64 // misses that waited on another caller's fill
	SharedFills           uint64 // misses answered by another replica's fill (the fill lease)
	Refreshed             uint64 // entries refilled ahead of their expiry because they were read
	Stale                 uint64 // stale entries served for an unreachable upstream
	Bypassed              uint64 // requests that may not be cached
	Invalidations         uint64 // made on this replica
}

// RedisStats describes the shared tier.
type RedisStats struct {
	Errors, WritesDropped uint64
	// BreakerOpen is true while Redis is skipped after failures.
	BreakerOpen bool
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	st := Stats{Upstreams: map[string]UpstreamStats{}, Evictions: c.evictions.Load()}
	c.stats.Range(func(k, v any) bool {
		s := v.(*counters)
		st.Upstreams[k.(string)] = UpstreamStats{
			MemoryHits: s.memHits.Load(), RedisHits: s.redisHits.Load(), Misses: s.misses.Load(), Fills: s.fills.Load(),
			Coalesced: s.coalesced.Load(), SharedFills: s.sharedFills.Load(), Refreshed: s.refreshed.Load(), Stale: s.stale.Load(), Bypassed: s.bypassed.Load(), Invalidations: s.invalidations.Load(),
		}
		return true
	})
	if r := c.redis; r != nil {
		st.Redis = &RedisStats{Errors: r.errors.Load(), WritesDropped: r.dropped.Load(), BreakerOpen: r.brk.Open()}
	}
	return st
}

// Summary is a one-line account of the cache's work, for the shutdown log.
func (c *Cache) Summary() string {
	st := c.Stats()
	var t UpstreamStats
	for _, s := range st.Upstreams {
		t.MemoryHits += s.MemoryHits
		t.RedisHits += s.RedisHits
		t.Misses += s.Misses
		t.Fills += s.Fills
		t.Stale += s.Stale
		t.Coalesced += s.Coalesced
		t.Invalidations += s.Invalidations
	}
	redisErrors := uint64(0)
	if st.Redis != nil {
		redisErrors = st.Redis.Errors
	}
	return fmt.Sprintf("memory_hits=%d redis_hits=%d misses=%d upstream_fills=%d coalesced=%d stale_served=%d invalidations=%d evictions=%d redis_errors=%d",
		t.MemoryHits, t.RedisHits, t.Misses, t.Fills, t.Coalesced, t.Stale, t.Invalidations, st.Evictions, redisErrors)
}
