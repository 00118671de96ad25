package cache

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/panics"
)

// Refresh ahead: a hot key never misses. A memory hit in the last tenth of
// its entry's freshness (at least the last 500 ms of it) starts one background fill of the same key (at
// most one per entry), so the entry is replaced before it expires and the
// readers after it hit too. An entry nobody reads near its end is never
// refreshed, so the upstream is asked for what is read, not for what was.
// The refresh joins the key's single flight and, with Redis, first adopts
// an entry another replica refreshed meanwhile, then fills under the fill
// lease: one upstream call per expiry, however many replicas read the key.

// Which entries are refreshed ahead.
const (
	RefreshOff    = "off"
	RefreshPublic = "public" // public entries only (the default)
	RefreshAll    = "all"    // private ones too, with the reader's credential
)

// A read refreshes an entry in the last tenth of its freshness, but no
// later than refreshLead before it expires (and no earlier than three
// quarters in): a short-lived entry needs time to be filled again, or its
// readers miss while the refill is on its way.
const (
	refreshWindow = 10
	refreshLead   = 500 * time.Millisecond
)

// refreshTimeout bounds a background refresh that its reader no longer
// waits for.
const refreshTimeout = 30 * time.Second

// nearExpiry reports whether e is in the part of its freshness where a
// read refreshes it.
func (e *entry) nearExpiry(now time.Time) bool {
	life := e.expires.Sub(e.filled)
	lead := max(life/refreshWindow, min(refreshLead, life/4))
	return life > 0 && !now.Before(e.expires.Add(-lead))
}

// refreshDue reports whether the entry l hit is due a refresh that no
// reader has started yet.
func (c *Cache) refreshDue(l *lookup, now time.Time) bool {
	e := l.hit
	if e == nil || l.r.Policy != nil || c.refresh == RefreshOff || (e.scope != mcp.ScopePublic && c.refresh != RefreshAll) {
		return false
	}
	return e.nearExpiry(now) && atomic.LoadInt32(&e.refreshing) == 0
}

// maybeRefresh starts the refresh of the entry l hit (in memory, or in
// Redis when memory did not hold it), if it is due and this is its first
// reader to see that.
func (c *Cache) maybeRefresh(ctx context.Context, l *lookup, fill Fill, now time.Time) {
	e := l.hit
	if !c.refreshDue(l, now) || !atomic.CompareAndSwapInt32(&e.refreshing, 0, 1) {
		return
	}
	// The reader's values (trace, forwarded headers) go with the refresh;
	// its cancellation does not: the reader has its answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
	own := *l // the reader goes on with l
	c.refreshes.Add(1)
	go func() {
		defer c.refreshes.Done()
		defer cancel()
		var err error
		defer func() {
			if err != nil {
				c.log.Error("panic refreshing a cache entry", "upstream", own.r.Upstream, "err", err, "stack", string(err.(*panics.Error).Stack))
			}
		}()
		defer panics.Recover(&err)
		c.refreshNow(ctx, &own, fill)
	}()
}

// refreshNow replaces l's entry: with one another replica stored if it is
// young, else with a fill, joined with any miss of the same key.
func (c *Cache) refreshNow(ctx context.Context, l *lookup, fill Fill) {
	young := func(e *entry) bool { return !e.nearExpiry(c.now()) }
	if _, ok := c.fromRedisIf(ctx, l, c.now(), young); ok {
		return
	}
	_, _, _ = c.flight.do(ctx, flightKey(l), func(fctx context.Context) outcome {
		l.st.refreshed.Add(1)
		return c.fillShared(fctx, fill, l, young)
	})
}
