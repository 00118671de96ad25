package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// An upstream reached with each caller's own token (oauth mode user) is
// probed like any other, with no traffic and no consent: the 401 challenge
// it answers a request without a token with says it is up. A required one
// that goes down makes the replica unready within health.probe_interval,
// and its return ready again as soon, however long no user has consented;
// and a caller asked to consent is no outage of the upstream: the log has
// one failing line and one recovered line, those of the outage itself.
func TestOAuthUpstreamProbedWithoutConsent(t *testing.T) {
	const probe = time.Second
	is := newIssuer(t)
	as, sw := newSwitchableAuthServer(t)
	o := startOps(t, "public_url: ${TEST_PUBLIC_URL}\n"+is.authYAML("")+fmt.Sprintf("health: {probe_interval: %s}\nupstreams:", probe)+
		httpUpstreamYAML("crm", as.MCP, "required: true", "timeout: 2s", "oauth: {mode: user}"))
	within := probe + 3*time.Second // a probe, and a loaded machine's slack
	step := func(what string, code int, state string) {
		t.Helper()
		eventually(t, within, func() error {
			got, r := o.readyz(t)
			if got == code && r.Upstreams["crm"].State == state {
				return nil
			}
			return fmt.Errorf("%s: /readyz still %d (crm %q), want %d (crm %q); probe interval %v",
				what, got, r.Upstreams["crm"].State, code, state, probe)
		})
	}
	step("up, never called", http.StatusOK, "ready")
	sw.down()
	step("down", http.StatusServiceUnavailable, "down")
	sw.up()
	step("back", http.StatusOK, "ready")
	eventually(t, 10*time.Second, func() error {
		if n := o.logCount("upstream recovered", "upstream=crm"); n != 1 {
			return fmt.Errorf("%d recovered lines", n)
		}
		return nil
	})

	// Alice consents; Bob, who has not, is asked to, on the session
	// Alice's calls opened, again and again; the upstream stays up.
	if got := authorize(t, o.MCP, is.mint("rsa-1", claims{"sub": "alice"}), "alice-at-crm"); got != "you are alice-at-crm" {
		t.Fatalf("alice after consent: %q", got)
	}
	bob := is.mint("rsa-1", claims{"sub": "bob"})
	for range 3 {
		if got := whoami(t, o.MCP, bob, ""); got.link == "" {
			t.Fatalf("bob was not asked to consent: %+v", got)
		}
	}
	if code, r := o.readyz(t); code != http.StatusOK || r.Upstreams["crm"].State != "ready" {
		t.Errorf("after calls awaiting consent: /readyz %d, crm %q", code, r.Upstreams["crm"].State)
	}
	if n := o.logCount("level=WARN", "upstream=crm"); n != 1 {
		t.Errorf("%d warnings of crm, want the outage's one ('upstream failing'):\n%s", n, o.Logs.String())
	}
}
