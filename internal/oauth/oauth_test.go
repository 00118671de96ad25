package oauth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseChallenge(t *testing.T) {
	for _, c := range []struct {
		header string // values, one a line
		want   challenge
	}{
		{`Bearer resource_metadata="https://r/.well-known/x", scope="a b", error="insufficient_scope"`, challenge{"https://r/.well-known/x", "a b", "insufficient_scope", false}},
		{`Bearer error=invalid_token,scope=read`, challenge{"", "read", "invalid_token", false}},
		{`Bearer scope="mcp:basic", resource_metadata="http://localhost:1/.well-known/oauth-protected-resource/mcp"`, challenge{"http://localhost:1/.well-known/oauth-protected-resource/mcp", "mcp:basic", "", false}},
		{`Basic realm="x"`, challenge{}},
		{`Bearer error_description="say \"hi\", twice", error="invalid_token"`, challenge{"", "", "invalid_token", false}},
		{`DPoP resource_metadata="https://r/.well-known/x"`, challenge{"https://r/.well-known/x", "", "", true}},
		{`DPoP error="use_dpop_nonce", algs="ES256 RS256"`, challenge{"", "", "use_dpop_nonce", true}},
		{"DPoP algs=\"ES256\"\nBearer scope=read", challenge{"", "read", "", false}}, // either: a bearer token does
		{"Bearer scope=read\nDPoP algs=\"ES256\"", challenge{"", "read", "", false}},
	} {
		h := http.Header{"Www-Authenticate": strings.Split(c.header, "\n")}
		if got := parseChallenge(h); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.header, got, c.want)
		}
	}
}

// A resource names the server at its URL, or its origin (or a path above
// it); never another origin, another path, or with a fragment.
func TestCovers(t *testing.T) {
	for _, c := range []struct {
		resource string
		ok       bool
	}{
		{"http://localhost:1/mcp", true}, {"http://localhost:1/mcp/", true}, {"http://localhost:1", true}, {"http://LOCALHOST:1/mcp", true},
		{"https://evil.example.com/mcp", false}, {"http://localhost:2/mcp", false}, {"http://localhost:1/other", false},
		{"http://localhost:1/m", false}, {"http://localhost:1/mcp#x", false}, {"https://localhost:1/mcp", false},
	} {
		if got := covers(c.resource, "http://localhost:1/mcp"); got != c.ok {
			t.Errorf("covers(%s): %v", c.resource, got)
		}
	}
}

// RFC 9207: a present iss is compared as a string; an advertised one must
// be present.
func TestCheckIssuer(t *testing.T) {
	p := pending{Issuer: "https://as.example.com/tenant"}
	for _, c := range []struct {
		q        string
		iss, bad bool
	}{
		{"iss=https://as.example.com/tenant", true, false}, {"", false, false}, {"", true, true},
		{"iss=https://as.example.com/tenant/", true, true}, {"iss=https://evil.example.com", false, true},
		{"iss=https://as.example.com/tenant&iss=https://as.example.com/tenant", true, true},
	} {
		p.IssParam = c.iss
		q, _ := url.ParseQuery(c.q)
		if err := checkIssuer(p, q); (err != nil) != c.bad {
			t.Errorf("%q (advertised %v): %v", c.q, c.iss, err)
		}
	}
}

// Every URL discovery is given must be https, or http on a loopback host,
// before anything is fetched from it or shown to a user: an upstream (or
// whoever can alter its answers) that names a plain-http or internal
// authorization server, or a javascript: authorization link, is refused.
func TestDiscoveryRefusesInsecureURLs(t *testing.T) {
	var named atomic.Value // the metadata the fixture serves
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := named.Load().(map[string]string)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/oauth-protected-resource/mcp":
			fmt.Fprintf(w, `{"resource":%q,"authorization_servers":[%q]}`, "http://"+r.Host+"/mcp", m["issuer"])
		case "/.well-known/oauth-authorization-server":
			fmt.Fprintf(w, `{"issuer":%q,"authorization_endpoint":%q,"token_endpoint":%q}`, m["issuer"], m["authorize"], m["token"])
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c := New(Options{Upstream: "crm", Resource: srv.URL + "/mcp", Mode: ModeUser, HTTP: srv.Client(), Store: NewMemoryStore()}, []byte("secret-0123456789"))
	for _, tc := range []struct {
		name string
		ch   challenge
		m    map[string]string
	}{
		{"a plain-http authorization server elsewhere", challenge{}, map[string]string{"issuer": "http://192.0.2.7", "authorize": srv.URL + "/authorize", "token": srv.URL + "/token"}},
		{"a javascript: authorization link", challenge{}, map[string]string{"issuer": srv.URL, "authorize": "javascript:alert(1)", "token": srv.URL + "/token"}},
		{"a plain-http token endpoint elsewhere", challenge{}, map[string]string{"issuer": srv.URL, "authorize": srv.URL + "/authorize", "token": "http://192.0.2.7/token"}},
		{"plain-http resource metadata elsewhere", challenge{ResourceMetadata: "http://192.0.2.7/.well-known/oauth-protected-resource"}, map[string]string{"issuer": srv.URL, "authorize": srv.URL + "/authorize", "token": srv.URL + "/token"}},
	} {
		named.Store(tc.m)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d, err := c.discover(ctx, tc.ch)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "not https") {
			t.Errorf("%s: %+v, %v; want refused as not https, before any fetch", tc.name, d, err)
		}
	}
	named.Store(map[string]string{"issuer": srv.URL, "authorize": srv.URL + "/authorize", "token": srv.URL + "/token"})
	if _, err := c.discover(context.Background(), challenge{}); err != nil {
		t.Errorf("a loopback http authorization server: %v", err)
	}
}

type notFoundAnywhere struct{}

func (notFoundAnywhere) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusNotFound, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// A 2025-03-26 server publishes no metadata, and its authorization server
// is taken to be at its own origin: those default endpoints are held to
// the same rule, so a plain-http upstream elsewhere is not sent codes and
// verifiers in clear either.
func TestDefaultEndpointsMustBeSecure(t *testing.T) {
	c := New(Options{Upstream: "crm", Resource: "http://192.0.2.7/mcp", Mode: ModeUser, HTTP: &http.Client{Transport: notFoundAnywhere{}},
		Store: NewMemoryStore()}, []byte("secret-0123456789"))
	if d, err := c.discover(context.Background(), challenge{}); err == nil || !strings.Contains(err.Error(), "not https") {
		t.Errorf("the default endpoints of a plain-http upstream elsewhere: %+v, %v; want refused", d, err)
	}
}
