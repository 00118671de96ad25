package test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// Refresh ahead (cache.refresh_ahead), on entries that live 2 s: a key read
// all the time never misses after its first read, and its upstream is
// asked again before each expiry; a key nobody reads near its end is not
// refreshed; private entries are refreshed only with refresh_ahead: all.
func TestRefreshAhead(t *testing.T) {
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	public := cachedProxy(t, up.URL, "")
	private := cachedProxy(t, up.URL, "")
	all := cachedProxy(t, up.URL, "cache: {refresh_ahead: all}\n")

	// The reads are spread over real time on purpose: entries live 2 s
	// by the process's own clock, and which reads come near an expiry is
	// what refresh ahead is about.
	var wg sync.WaitGroup
	hot := func(p *proxy, uri, token string, d time.Duration) {
		wg.Go(func() {
			for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
				readAs(t, p.URL, uri, token)
			}
		})
	}
	hot(public, "h+test://hot/a", "", 5*time.Second)
	hot(private, "h+test://priv/hot/b", "tok-b", 2600*time.Millisecond)
	hot(all, "h+test://priv/hot/c", "tok-c", 2600*time.Millisecond)
	wg.Go(func() { // read at the start and half-way only
		readAs(t, public.URL, "h+test://hot/cold", "")
		time.Sleep(time.Second)
		readAs(t, public.URL, "h+test://hot/cold", "")
	})
	wg.Wait()

	if n := h.count("test://hot/a"); n < 3 {
		t.Errorf("a key read for 5 s with a 2 s life was filled %d times, want at least 3 (refreshed before each expiry)", n)
	}
	if n := h.count("test://hot/cold"); n != 1 {
		t.Errorf("a key not read near its expiry was filled %d times, want 1", n)
	}
	if got := misses(t, public); got != 2 { // the first read of each key
		t.Errorf("%d misses with refresh ahead on two public keys, want 2 (the hot key never missed again)", got)
	}
	if got := misses(t, private); got < 2 {
		t.Errorf("private entries are refreshed by default: %d misses over an expiry, want 2", got)
	}
	if got := misses(t, all); got != 1 {
		t.Errorf("refresh_ahead: all: a hot private key missed %d times, want 1", got)
	}
	if counted(t, scrape(t, public.URL), "manifold_cache_refreshes_total", "upstream", "h") < 1 {
		t.Errorf("no refresh counted")
	}
}

// misses reads manifold_cache_misses_total for upstream h.
func misses(t *testing.T, p *proxy) int {
	t.Helper()
	return int(counted(t, scrape(t, p.URL), "manifold_cache_misses_total", "upstream", "h"))
}

// Two replicas sharing Redis read the same hot key: one of them refreshes
// it before each expiry and the other adopts that entry, so the upstream
// is asked once per expiry, not once per replica.
func TestRefreshAheadAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	// A Redis timeout the race detector under load does not exceed (as in
	// TestOneFillAcrossReplicas): a timed-out subscription flushes memory.
	shared := fmt.Sprintf("cache: {secret: refresh-secret-0123456789, redis: {url: %q, timeout: 2s}}\n", rs.URL())
	replicas := []*proxy{cachedProxy(t, up.URL, shared), cachedProxy(t, up.URL, shared)}
	var wg sync.WaitGroup
	for _, p := range replicas {
		wg.Go(func() {
			for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
				readAs(t, p.URL, "h+test://hot/shared", "")
			}
		})
	}
	wg.Wait()
	// 6 s of a 2 s life refreshed 500 ms ahead: the first fill and 3 or 4
	// refreshes (9 when each replica refreshes for itself).
	if n := h.count("test://hot/shared"); n > 6 {
		t.Errorf("two replicas reading one hot key for 6 s made %d upstream calls, want at most 6 (one per expiry, not one per replica)", n)
	}
	for i, p := range replicas {
		if got := misses(t, p); got > 1 {
			t.Errorf("replica %d missed %d times, want at most its first read", i, got)
		}
	}
}
