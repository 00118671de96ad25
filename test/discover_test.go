package test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// discoverResult is what a test reads of server/discover.
type discoverResult struct {
	Capabilities map[string]json.RawMessage `json:"capabilities"`
	TTLms        int64                      `json:"ttlMs"`
	CacheScope   string                     `json:"cacheScope"`
}

// server/discover right after start waits (boundedly) for the upstreams'
// first probe, so it advertises what they serve; an answer that lacks an
// upstream not probed yet, or down, is not to be cached (ttlMs 0). Over
// HTTP, with an upstream slow to answer its first probe, and over stdio,
// with a child that has just been started.
func TestDiscoverRightAfterStart(t *testing.T) {
	inner := modernHandler(sdkToolServer("web", sdkOptions{resources: 1}))
	var first sync.Once
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first.Do(func() { time.Sleep(1500 * time.Millisecond) }) // a server still starting
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("web", slow.URL+"/mcp"))
	var d discoverResult
	post(t, p.URL, headers("server/discover", ""), rpcBody(1, "server/discover", "")).result(t, &d)
	if d.Capabilities["tools"] == nil || d.Capabilities["prompts"] == nil || d.TTLms != 30_000 {
		t.Errorf("over HTTP, right after start: %+v", d)
	}

	s := startStdio(t, "upstreams:"+childUpstream("kid", "sdk-tools:kid"))
	r := s.ask(t, 1, rpcBody(1, "server/discover", ""))
	var sd discoverResult
	r.result(t, &sd)
	if sd.Capabilities["tools"] == nil || sd.TTLms != 30_000 {
		t.Errorf("over stdio, right after start: %s", r.Body)
	}

	down := startProxy(t, "upstreams:"+httpUpstreamYAML("web", slow.URL+"/mcp")+httpUpstreamYAML("gone", "http://127.0.0.1:1/mcp"))
	start := time.Now()
	var dd discoverResult
	post(t, down.URL, headers("server/discover", ""), rpcBody(1, "server/discover", "")).result(t, &dd)
	// A bounded wait: the first probe round is waited for 3 s at most,
	// not the 30 s of an upstream's timeout.
	if dd.TTLms != 0 || time.Since(start) > 10*time.Second || !strings.Contains(string(dd.Capabilities["tools"]), "{") {
		t.Errorf("with an upstream down: %+v after %v", dd, time.Since(start))
	}
}
