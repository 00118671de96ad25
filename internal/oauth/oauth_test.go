package oauth

import (
	"net/http"
	"net/url"
	"testing"
)

func TestParseChallenge(t *testing.T) {
	for _, c := range []struct {
		header string
		want   challenge
	}{
		{`Bearer resource_metadata="https://r/.well-known/x", scope="a b", error="insufficient_scope"`, challenge{"https://r/.well-known/x", "a b", "insufficient_scope"}},
		{`Bearer error=invalid_token,scope=read`, challenge{"", "read", "invalid_token"}},
		{`Bearer scope="mcp:basic", resource_metadata="http://localhost:1/.well-known/oauth-protected-resource/mcp"`, challenge{"http://localhost:1/.well-known/oauth-protected-resource/mcp", "mcp:basic", ""}},
		{`Basic realm="x"`, challenge{}},
		{`Bearer error_description="say \"hi\", twice", error="invalid_token"`, challenge{"", "", "invalid_token"}},
	} {
		h := http.Header{"Www-Authenticate": {c.header}}
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
