package process

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// historyMinutes is how far back the admin page's history goes.
const historyMinutes = 15

// traffic is what the admin page keeps of the requests served, so that an
// idle Manifold (whose upstreams' latency and rate, of the last minute, are
// blank) still shows them: totals since start, and per-minute counts of
// the last quarter hour.
type traffic struct {
	requests, errors atomic.Uint64
	hits             func() uint64 // the cache's hits, both tiers, every upstream
	now              func() time.Time

	mu    sync.Mutex
	marks []trafficMark // the counts at the start of each minute kept, oldest first
}

type trafficMark struct {
	at     time.Time
	counts uiTraffic
}

// uiTraffic counts requests answered, those answered with an error, and
// cache hits.
type uiTraffic struct {
	Requests  uint64 `json:"requests"`
	Errors    uint64 `json:"errors"`
	CacheHits uint64 `json:"cacheHits"`
}

// uiMinute is one minute of the history: its start, and what it counted.
type uiMinute struct {
	Minute string `json:"minute"` // RFC 3339, UTC
	uiTraffic
}

func newTraffic(hits func() uint64) *traffic {
	t := &traffic{hits: hits, now: time.Now}
	t.marks = []trafficMark{{at: t.now().Truncate(time.Minute)}}
	return t
}

// count is router.Observed's hook.
func (t *traffic) count(_ context.Context, _ string, _ time.Duration, err error) {
	t.requests.Add(1)
	if err != nil {
		t.errors.Add(1)
	}
}

func (t *traffic) totals() uiTraffic {
	return uiTraffic{Requests: t.requests.Load(), Errors: t.errors.Load(), CacheHits: t.hits()}
}

// run marks the start of each minute until ctx ends, so that a minute
// without requests counts none.
func (t *traffic) run(ctx context.Context) {
	for {
		next := t.now().Truncate(time.Minute).Add(time.Minute)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
			t.mark()
		}
	}
}

// mark records the counts at the start of the current minute, unless they
// are recorded.
func (t *traffic) mark() {
	minute := t.now().Truncate(time.Minute)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.marks[len(t.marks)-1].at.Before(minute) {
		return
	}
	t.marks = append(t.marks, trafficMark{at: minute, counts: t.totals()})
	if len(t.marks) > historyMinutes {
		t.marks = slices.Delete(t.marks, 0, len(t.marks)-historyMinutes)
	}
}

// snapshot is the totals, and the minutes kept (oldest first, the
// current one last), which add up to them.
func (t *traffic) snapshot() (uiTraffic, []uiMinute) {
	t.mark()
	t.mu.Lock()
	marks := slices.Clone(t.marks)
	t.mu.Unlock()
	totals := t.totals()
	end := totals
	out := make([]uiMinute, len(marks))
	for i := len(marks) - 1; i >= 0; i-- {
		m := marks[i]
		out[i] = uiMinute{Minute: m.at.UTC().Format(time.RFC3339), uiTraffic: uiTraffic{
			Requests: since(end.Requests, m.counts.Requests), Errors: since(end.Errors, m.counts.Errors), CacheHits: since(end.CacheHits, m.counts.CacheHits)}}
		end = m.counts
	}
	return totals, out
}

// since is a counter's growth from was to now; none if it went back (an
// upstream's cache counters are not kept across every reload).
func since(now, was uint64) uint64 {
	if now < was {
		return 0
	}
	return now - was
}

// cacheHits sums the cache's hits of both tiers over every upstream.
func (p *Process) cacheHits() uint64 {
	var n uint64
	for _, s := range p.cache.Stats().Upstreams {
		n += s.MemoryHits + s.RedisHits
	}
	return n
}
