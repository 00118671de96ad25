package test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Sixteen callers at once keep reusing their connections to the upstream
// (64 idle ones are kept): a pool smaller than the calls in flight would
// open and close connections all the time.
func TestUpstreamConnectionsReused(t *testing.T) {
	for _, c := range []struct {
		extra    string
		min, max int64 // new connections over 16 × 25 calls
	}{
		{"", 16, 24}, // one per caller, plus negotiation and the watch stream
	} {
		t.Run(fmt.Sprintf("%q", c.extra), func(t *testing.T) {
			var opened atomic.Int64
			srv := httptest.NewUnstartedServer(modernHandler(sleepyServer().Server))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					opened.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			p := startProxy(t, "upstreams:"+httpUpstreamYAML("a", srv.URL+"/mcp", c.extra))
			call := func() {
				r := post(t, p.URL, headers("tools/call", "a_sleep"), rpcBody(1, "tools/call", `"name":"a_sleep","arguments":{"ms":2}`))
				if r.Status != http.StatusOK || r.Error != nil {
					t.Errorf("tools/call: %d %s", r.Status, r.Body)
				}
			}
			call()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for range 25 {
						call()
					}
				})
			}
			wg.Wait()
			t.Logf("%d connections opened", opened.Load())
			if n := opened.Load(); n < c.min || n > c.max {
				t.Errorf("%d connections opened to the upstream for 401 calls, 16 at a time; want %d to %d", n, c.min, c.max)
			}
		})
	}
}
