package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// opsView is a Manifold without an admin listener, trusting a test issuer,
// with an open upstream and one (vault) only the eng group may use; the
// operators' endpoints are on the main listener.
type opsView struct {
	base             string // http://127.0.0.1:PORT
	eng, sales, oper string // tokens
}

func newOpsView(t *testing.T, extra string) *opsView {
	is := newIssuer(t)
	openUp, _ := trackedModern(t, sdkToolServer("open", sdkOptions{resources: 1}))
	vaultUp, _ := trackedModern(t, sdkToolServer("vault", sdkOptions{resources: 1}))
	p := startProxy(t, is.authYAML(extra)+"upstreams:"+httpUpstreamYAML("open", openUp.URL)+
		httpUpstreamYAML("vault", vaultUp.URL, "access: [{claim: groups, values: [eng]}]"))
	v := &opsView{base: strings.TrimSuffix(p.URL, "/mcp"),
		eng:   is.mint("rsa-1", claims{"sub": "erin", "groups": []string{"eng"}}),
		sales: is.mint("rsa-1", claims{"sub": "sam", "groups": []string{"sales"}}),
		oper:  is.mint("rsa-1", claims{"sub": "olga", "groups": []string{"sre"}}),
	}
	// Both upstreams answer before anything is looked at, so that /readyz
	// has something to tell.
	eventually(t, 10*time.Second, func() error {
		code, body := fetch(t, http.MethodGet, v.base+"/readyz", bearerHeader(v.eng))
		if code != http.StatusOK || !strings.Contains(body, `"vault":{"state":"ready"`) {
			return fmt.Errorf("/readyz as eng: %d %s", code, body)
		}
		return nil
	})
	return v
}

func bearerHeader(tok string) http.Header {
	if tok == "" {
		return nil
	}
	return http.Header{"Authorization": {"Bearer " + tok}}
}

// names returns the upstreams each operational endpoint names to the
// holder of tok ("" for none): /readyz's upstreams, /ui/state's rows and
// the upstream labels of /metrics.
func (v *opsView) names(t *testing.T, tok string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	code, body := fetch(t, http.MethodGet, v.base+"/readyz", bearerHeader(tok))
	var r readyzBody
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz: %d %s (%v)", code, body, err)
	}
	for name := range r.Upstreams {
		out["/readyz"] = append(out["/readyz"], name)
	}
	if tok == "" {
		return out
	}
	code, body = fetch(t, http.MethodGet, v.base+"/ui/state", bearerHeader(tok))
	var st struct {
		Upstreams []struct{ Name string } `json:"upstreams"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != http.StatusOK {
		t.Fatalf("/ui/state: %d %s (%v)", code, body, err)
	}
	for _, u := range st.Upstreams {
		out["/ui/state"] = append(out["/ui/state"], u.Name)
	}
	code, body = fetch(t, http.MethodGet, v.base+"/metrics", bearerHeader(tok))
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, name := range []string{"open", "vault"} {
		if strings.Contains(body, `upstream="`+name+`"`) {
			out["/metrics"] = append(out["/metrics"], name)
		}
	}
	return out
}

func wantNames(t *testing.T, who string, got map[string][]string, endpoints []string, want ...string) {
	t.Helper()
	for _, ep := range endpoints {
		names := map[string]bool{}
		for _, n := range got[ep] {
			names[n] = true
		}
		if len(names) != len(want) {
			t.Errorf("%s: %s names %v, want %v", who, ep, got[ep], want)
			continue
		}
		for _, w := range want {
			if !names[w] {
				t.Errorf("%s: %s names %v, want %v", who, ep, got[ep], want)
			}
		}
	}
}

var opsEndpoints = []string{"/readyz", "/ui/state", "/metrics"}

// With authentication on and no admin listener, the operational endpoints
// tell a caller no more than /mcp does: without a token, /readyz says only
// whether the replica is ready; a token sees in /readyz, /ui/state and
// /metrics only the upstreams its access rules show it.
func TestOpsEndpointsFollowAccessRules(t *testing.T) {
	v := newOpsView(t, "")
	code, body := fetch(t, http.MethodGet, v.base+"/readyz", nil)
	if code != http.StatusOK || strings.Contains(body, "open") || strings.Contains(body, "vault") || !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz without a token: %d %s, want ready and no upstream named", code, body)
	}
	code, body = fetch(t, http.MethodGet, v.base+"/readyz", bearerHeader("not-a-token"))
	if code != http.StatusOK || strings.Contains(body, "vault") {
		t.Errorf("/readyz with a bad token: %d %s, want ready and no upstream named", code, body)
	}
	wantNames(t, "sales", v.names(t, v.sales), opsEndpoints, "open")
	wantNames(t, "eng", v.names(t, v.eng), opsEndpoints, "open", "vault")
	// Not an operator without admin.operators, whatever its claims.
	wantNames(t, "sre", v.names(t, v.oper), opsEndpoints, "open")
}

// A principal admin.operators names sees every upstream, hidden ones too.
func TestOperatorSeesEveryUpstream(t *testing.T) {
	v := newOpsView(t, "admin:\n  operators: [{claim: groups, values: [sre]}]\n")
	wantNames(t, "operator", v.names(t, v.oper), opsEndpoints, "open", "vault")
	wantNames(t, "sales", v.names(t, v.sales), opsEndpoints, "open")
	if got := v.names(t, ""); len(got["/readyz"]) != 0 {
		t.Errorf("/readyz without a token names %v", got["/readyz"])
	}
}

// The admin listener refuses a Host that is neither loopback, an IP
// address (a probe or a scraper addressing the pod), nor one of
// allowed_hosts, as the main listener does: a page that DNS-rebinds its
// name to the admin port reads nothing.
func TestAdminListenerChecksHost(t *testing.T) {
	up := modernSDK(t, newHintedServer().Server)
	o := startOps(t, "allowed_hosts: [ops.internal]\nupstreams:"+httpUpstreamYAML("a", up.URL))
	o.waitReady(t, http.StatusOK, nil)
	for _, path := range []string{"/metrics", "/ui/state", "/readyz", "/debug/pprof/", "/healthz"} {
		code, body := fetch(t, http.MethodGet, o.Admin+path, http.Header{"Host": {"rebound.example:9090"}})
		if code != http.StatusForbidden || !strings.Contains(body, "not allowed") {
			t.Errorf("%s with a foreign Host: %d %.80s, want 403", path, code, body)
		}
		for _, host := range []string{"localhost:9090", "10.1.2.3:9090", "[fd00::1]:9090", "ops.internal:9090"} {
			if code, _ := fetch(t, http.MethodGet, o.Admin+path, http.Header{"Host": {host}}); code != http.StatusOK {
				t.Errorf("%s with Host %s: %d, want 200", path, host, code)
			}
		}
	}
	if code, _ := fetch(t, http.MethodPost, o.Admin+"/reload", http.Header{"Host": {"rebound.example"}}); code != http.StatusForbidden {
		t.Errorf("POST /reload with a foreign Host: %d, want 403", code)
	}
}
