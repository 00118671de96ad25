package test

import (
	"net/http"
	"strings"
	"testing"
)

// A completion of a resource when the caller's view holds no upstream
// (access rules hide the only one) is a resource not found, over HTTP and
// over stdio, and the process goes on serving: no input takes it down.
func TestCompletionWithEmptyView(t *testing.T) {
	is := newIssuer(t)
	up := modernSDK(t, sdkToolServer("vault", sdkOptions{resources: 1}))
	yaml := is.authYAML("") + "namespace: none\nupstreams:" + httpUpstreamYAML("vault", up.URL, "access: [{claim: groups, values: [eng]}]")
	complete := `"ref":{"type":"ref/resource","uri":"test://vault/{id}"},"argument":{"name":"id","value":"a"}`

	p := startProxy(t, yaml)
	sales := is.mint("rsa-1", claims{"sub": "sam", "groups": []string{"sales"}})
	r := post(t, p.URL, withToken(headers("completion/complete", ""), sales), rpcBody(1, "completion/complete", complete))
	r.wantError(t, http.StatusBadRequest, -32602)

	s := startStdio(t, yaml)
	first := s.ask(t, 1, rpcBody(1, "completion/complete", complete))
	if first.Error == nil || first.Error.Code != -32602 {
		t.Fatalf("stdio completion answered %s", first.Body)
	}
	if again := s.ask(t, 2, rpcBody(2, "server/discover", "")); again.Error != nil || !strings.Contains(string(again.Body), "supportedVersions") {
		t.Errorf("stdio after the completion: %s", again.Body)
	}
}
