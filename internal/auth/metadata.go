package auth

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// MetadataPath is where the protected resource metadata is served (RFC 9728
// §3). The document is served there and under the path-aware name too:
// MetadataPath followed by the endpoint's path, which is the URL the RFC
// derives from a resource identifier with a path (/mcp), and the first one
// MCP clients try.
const MetadataPath = "/.well-known/oauth-protected-resource"

// Resource describes this server as an OAuth protected resource.
type Resource struct {
	// Resource is the endpoint's canonical URL; "" derives it from each
	// request's Host (checked by the chain before it gets here).
	Resource             string
	AuthorizationServers []string
	ScopesSupported      []string
	// Endpoint is the MCP endpoint's path, "/mcp".
	Endpoint string
}

// identifier is the resource identifier for r.
func (res Resource) identifier(r *http.Request) string {
	if res.Resource != "" {
		return res.Resource
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + res.Endpoint
}

// MetadataURL is the document's path-aware URL, named in challenges.
func (res Resource) MetadataURL(r *http.Request) string {
	id := res.identifier(r)
	u, err := url.Parse(id)
	if err != nil || u.Host == "" {
		return MetadataPath
	}
	path := strings.TrimSuffix(u.Path, "/")
	return u.Scheme + "://" + u.Host + MetadataPath + path
}

// Published reports whether there is a metadata document to serve: only
// when it names an authorization server. Static tokens alone are API keys
// an operator hands out; a document naming no server (or a made-up one)
// would send an MCP client into a discovery that cannot end in a token.
func (res Resource) Published() bool { return len(res.AuthorizationServers) > 0 }

// Challenge is the WWW-Authenticate value of a 401: where to learn how to
// get a token (when the metadata is published), and, when the caller sent
// one, that it was refused (RFC 6750 §3).
func (res Resource) Challenge(r *http.Request, invalid bool) string {
	c := "Bearer"
	if res.Published() {
		c += ` resource_metadata="` + res.MetadataURL(r) + `"`
	}
	if invalid {
		if res.Published() {
			c += ","
		}
		c += ` error="invalid_token"`
	}
	return c
}

// ServeHTTP answers GET with the metadata document.
func (res Resource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	doc := struct {
		Resource               string   `json:"resource"`
		AuthorizationServers   []string `json:"authorization_servers,omitempty"`
		ScopesSupported        []string `json:"scopes_supported,omitempty"`
		BearerMethodsSupported []string `json:"bearer_methods_supported"`
	}{res.identifier(r), res.AuthorizationServers, res.ScopesSupported, []string{"header"}}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_ = json.NewEncoder(w).Encode(doc)
}
