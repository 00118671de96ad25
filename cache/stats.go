package cache

import (
	"fmt"
	"sort"

	"github.com/manifold-mcp/manifold/internal/metrics"
)

// Collect implements metrics.Collector.
func (c *Cache) Collect() []metrics.Family {
	stats := c.snapshot()
	names := make([]string, 0, len(stats))
	for n := range stats {
		names = append(names, n)
	}
	sort.Strings(names)
	perUpstream := func(name, help string, get func(*counters) uint64, tier string) metrics.Family {
		f := metrics.Family{Name: name, Help: help, Type: "counter"}
		for _, n := range names {
			labels := []string{"upstream", n}
			if tier != "" {
				labels = append(labels, "tier", tier)
			}
			f.Samples = append(f.Samples, metrics.Sample{Labels: labels, Value: float64(get(stats[n]))})
		}
		return f
	}
	hits := perUpstream("manifold_cache_hits_total", "Answers served from a cache tier.", func(s *counters) uint64 { return s.memHits.Load() }, "memory")
	hits.Samples = append(hits.Samples, perUpstream("", "", func(s *counters) uint64 { return s.redisHits.Load() }, "redis").Samples...)
	fams := []metrics.Family{
		hits,
		perUpstream("manifold_cache_misses_total", "Lookups found in no tier.", func(s *counters) uint64 { return s.misses.Load() }, ""),
		perUpstream("manifold_cache_fills_total", "Upstream calls made to fill misses.", func(s *counters) uint64 { return s.fills.Load() }, ""),
		perUpstream("manifold_cache_coalesced_total", "Misses that waited on another caller's fill instead of calling the upstream.", func(s *counters) uint64 { return s.coalesced.Load() }, ""),
		perUpstream("manifold_cache_stale_served_total", "Stale entries served because the upstream could not be reached.", func(s *counters) uint64 { return s.stale.Load() }, ""),
		perUpstream("manifold_cache_bypassed_total", "Requests that may not be cached (non-cacheable methods, multi round-trip retries).", func(s *counters) uint64 { return s.bypassed.Load() }, ""),
		perUpstream("manifold_cache_invalidations_total", "Invalidations made on this replica.", func(s *counters) uint64 { return s.invalidations.Load() }, ""),
		{Name: "manifold_cache_evictions_total", Help: "Entries evicted from the memory tier to make room.", Type: "counter",
			Samples: []metrics.Sample{{Labels: []string{"tier", "memory"}, Value: float64(c.evictions.Load())}}},
	}
	if s := c.redis; s != nil {
		open := 0.0
		if s.brk.Open() {
			open = 1
		}
		fams = append(fams,
			metrics.Family{Name: "manifold_cache_redis_errors_total", Help: "Redis commands that failed or timed out.", Type: "counter",
				Samples: []metrics.Sample{{Value: float64(s.errors.Load())}}},
			metrics.Family{Name: "manifold_cache_redis_writes_dropped_total", Help: "Redis writes skipped because too many were in flight.", Type: "counter",
				Samples: []metrics.Sample{{Value: float64(s.dropped.Load())}}},
			metrics.Family{Name: "manifold_cache_redis_breaker_open", Help: "1 while the Redis circuit breaker is open.", Type: "gauge",
				Samples: []metrics.Sample{{Value: open}}},
		)
	}
	return fams
}

// Summary is a one-line account of the cache's work, for the shutdown log.
func (c *Cache) Summary() string {
	var memHits, redisHits, misses, fills, stale, coalesced, invalidations uint64
	for _, s := range c.snapshot() {
		memHits += s.memHits.Load()
		redisHits += s.redisHits.Load()
		misses += s.misses.Load()
		fills += s.fills.Load()
		stale += s.stale.Load()
		coalesced += s.coalesced.Load()
		invalidations += s.invalidations.Load()
	}
	redisErrors := uint64(0)
	if c.redis != nil {
		redisErrors = c.redis.errors.Load()
	}
	return fmt.Sprintf("memory_hits=%d redis_hits=%d misses=%d upstream_fills=%d coalesced=%d stale_served=%d invalidations=%d evictions=%d redis_errors=%d",
		memHits, redisHits, misses, fills, coalesced, stale, invalidations, c.evictions.Load(), redisErrors)
}

func (c *Cache) snapshot() map[string]*counters {
	out := map[string]*counters{}
	c.stats.Range(func(k, v any) bool {
		out[k.(string)] = v.(*counters)
		return true
	})
	return out
}
