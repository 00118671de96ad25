package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A required upstream that comes back after a 40 s outage makes the
// replica ready again within health.probe_interval of its return, with no
// request arriving: a down upstream is probed on an interval of its own,
// not only when the watch's reconnect backoff (by then tens of seconds)
// comes round.
func TestReadinessRecoversWithoutTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s outage")
	}
	const probe = time.Second
	h := newHintedServer()
	a := newSwitchable(t, modernHandler(h.Server))
	o := startOps(t, fmt.Sprintf("health: {probe_interval: %s}\nupstreams:", probe)+httpUpstreamYAML("a", a.URL(), "required: true", "timeout: 2s"))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	a.down()
	o.waitReady(t, http.StatusServiceUnavailable, map[string]string{"a": "down"})
	time.Sleep(40 * time.Second) // the outage itself: its length is the point
	a.up()
	back := time.Now()
	// /readyz reads the health records only; it sends the upstream nothing.
	eventually(t, probe+2*time.Second, func() error {
		code, r := o.readyz(t)
		if code == http.StatusOK && r.Upstreams["a"].State == "ready" {
			return nil
		}
		return fmt.Errorf("still %d (a %s) %v after the upstream came back; probe interval %v", code, r.Upstreams["a"].State, time.Since(back).Round(time.Millisecond), probe)
	})
}
