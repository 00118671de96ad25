package test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// A shared tier that is a Redis Cluster or a Sentinel-watched master behaves
// as one server does: replicas share entries, an upstream change reaches
// every replica, and a failover under load costs no error and never hands
// one credential's private answer to another.
func TestRedisTopologies(t *testing.T) {
	topologies := []struct {
		name  string
		start func(t *testing.T) (redisYAML string, shared topology)
	}{
		{"cluster", func(t *testing.T) (string, topology) {
			c := redistest.StartCluster(t)
			return fmt.Sprintf("{addrs: [%s]}", strings.Join(c.Addrs, ", ")), c
		}},
		{"sentinel", func(t *testing.T) (string, topology) {
			s := redistest.StartSentinel(t)
			return fmt.Sprintf("{addrs: [%s], master_name: %s}", s.Addr, s.MasterName), s
		}},
	}
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			redisYAML, rt := tc.start(t)
			h := newHintedServer()
			up, lt := trackedModern(t, h.Server)
			shared := fmt.Sprintf("cache: {secret: topology-secret-0123456789, stale_if_error: 1m, redis: %s}\n", redisYAML)
			a := cachedProxy(t, up.URL, shared)
			b := cachedProxy(t, up.URL, shared)

			sharesEntries(t, h, a, b, "test://pub/1")
			changeReachesEveryReplica(t, h, lt, a, b, 1)

			// Fail over and back, under load; after each, the tier is
			// shared again and changes reach every replica.
			for round := 2; round <= 3; round++ {
				stop := make(chan struct{})
				load := privateLoad(a, b, stop)
				rt.Failover()
				// Reads go on through the change and for a while after it,
				// while the clients find the new master: a window of real
				// time under load is what the test is about.
				time.Sleep(2 * time.Second)
				close(stop)
				if err := load(); err != nil {
					t.Errorf("failover %d: %v", round-1, err)
				}
				sharesEntries(t, h, a, b, fmt.Sprintf("test://pub/%d", round))
				changeReachesEveryReplica(t, h, lt, a, b, round)
			}
		})
	}
}

// topology is a shared Redis a test can fail over.
type topology interface {
	Failover()
}

// sharesEntries expects an entry made on replica a to be served by replica
// b: one upstream call for both. (a writes to Redis after answering; b
// finds the entry, or waits on a's fill lease, which a holds until it is
// stored.) After a failover a replica may skip the tier for its breaker's
// cooldown, so each attempt reads a new URI.
func sharesEntries(t *testing.T, h *hintedServer, a, b *proxy, prefix string) {
	t.Helper()
	attempt := 0
	eventually(t, 30*time.Second, func() error {
		attempt++
		uri := fmt.Sprintf("%s/%d", prefix, attempt)
		first, _, _ := readAs(t, a.URL, "h+"+uri, "")
		if again, _, _ := readAs(t, b.URL, "h+"+uri, ""); again != first || h.count(uri) != 1 {
			return fmt.Errorf("%s: replica b answered %q, replica a %q; %d upstream calls", uri, again, first, h.count(uri))
		}
		return nil
	})
}

// changeReachesEveryReplica caches a document on both replicas, has the
// upstream announce a change to the listener on replica a only, and expects
// replica b to fetch it again.
func changeReachesEveryReplica(t *testing.T, h *hintedServer, lt *listenTracker, a, b *proxy, round int) {
	t.Helper()
	uri := fmt.Sprintf("test://doc/%d", round)
	readAs(t, a.URL, "h+"+uri, "")
	readAs(t, b.URL, "h+"+uri, "")
	before := h.count(uri)
	st := listen(t, a.URL, 100+round, fmt.Sprintf(`{"resourceSubscriptions":["h+%s"]}`, uri))
	defer st.close()
	st.next(t, 5*time.Second)
	eventually(t, 10*time.Second, func() error {
		if lt.watching(uri) == 0 {
			return fmt.Errorf("%s not watched upstream", uri)
		}
		return nil
	})
	updateUpstream(t, h.Server, uri)
	st.expect(t, 100+round, "notifications/resources/updated", "h+"+uri)
	eventually(t, 5*time.Second, func() error {
		readAs(t, b.URL, "h+"+uri, "")
		if h.count(uri) == before {
			return fmt.Errorf("replica b still serves the old %s", uri)
		}
		return nil
	})
}

// privateLoad reads private entries with two credentials on both replicas
// until stop closes, and reports any failed read or any answer made for the
// other credential.
func privateLoad(a, b *proxy, stop chan struct{}) func() error {
	var wg sync.WaitGroup
	var reads, failures, crossed atomic.Int64
	var firstErr atomic.Value
	for i, p := range []*proxy{a, b, a, b} {
		token := []string{"token-A", "token-B"}[i/2]
		wg.Add(1)
		go func(url, token string) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				// Entries one replica writes, the other reads from Redis.
				uri := fmt.Sprintf("h+test://priv/%d", n%2000)
				h := headers("resources/read", uri)
				h.Set("Authorization", "Bearer "+token)
				text, err := readRaw(context.Background(), url, h, uri)
				reads.Add(1)
				switch {
				case err != nil:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case !strings.Contains(text, "Bearer "+token):
					crossed.Add(1)
				}
			}
		}(p.URL, token)
	}
	return func() error {
		wg.Wait()
		if failures.Load() > 0 || crossed.Load() > 0 || reads.Load() < 100 {
			return fmt.Errorf("during failover: %d reads, %d failed (first: %v), %d answered for another credential",
				reads.Load(), failures.Load(), firstErr.Load(), crossed.Load())
		}
		return nil
	}
}
