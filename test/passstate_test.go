package test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// An upstream's own requestState (a modern server asking its caller
// something) is bound by Manifold to the caller it was issued to: the
// upstream cannot tell Manifold's callers apart, so the caller that
// retries with it must be the one it was handed to. Another caller's
// retry with it is refused with -32602 and never reaches the upstream; the
// owner's retry completes, on another replica sharing the secret too.
func TestUpstreamRequestStateBoundToItsCaller(t *testing.T) {
	is := newIssuer(t)
	up := serveHTTP(t, streamingSDK(sdkToolServer("open", sdkOptions{})))
	shared := "cursor_secret: pass-state-secret-0123456789\n" + is.authYAML("") + "upstreams:" + httpUpstreamYAML("open", up.URL)
	a, b := startProxy(t, shared), startProxy(t, shared)
	erin := is.mint("rsa-1", claims{"sub": "erin"})
	sam := is.mint("rsa-1", claims{"sub": "sam"})
	call := func(url, token, extra string) *rawResponse {
		return post(t, url, withToken(headers("tools/call", "open_ask"), token), fmt.Sprintf(
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"open_ask","arguments":{}%s,%s}}`, extra, bridgeMeta))
	}
	var first struct {
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  string                     `json:"requestState"`
	}
	call(a.URL, erin, "").result(t, &first)
	if len(first.InputRequests) != 1 || strings.Contains(first.RequestState, "state-open") {
		t.Fatalf("the first answer: %d questions, requestState %q (the upstream's, in clear)", len(first.InputRequests), first.RequestState)
	}
	key := slices.Collect(maps.Keys(first.InputRequests))[0]
	retry := fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:{"action":"accept","content":{}}}`, first.RequestState, key)
	if r := call(a.URL, sam, retry); r.Error == nil || r.Error.Code != -32602 || r.Status != 400 {
		t.Errorf("sam's retry with erin's requestState: HTTP %d %s", r.Status, r.Body)
	}
	tampered := fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:{"action":"accept","content":{}}}`, first.RequestState+"x", key)
	if r := call(a.URL, erin, tampered); r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("a tampered requestState: HTTP %d %s", r.Status, r.Body)
	}
	for _, p := range []*proxy{a, b} {
		if r := call(p.URL, erin, retry); !strings.Contains(string(r.Body), "open: answered") {
			t.Errorf("erin's retry answered %s", r.Body)
		}
	}
}
