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

// Challenge is the WWW-Authenticate value of a 401: where to learn how to
// get a token, and, when the caller sent one, that it was refused.
func (res Resource) Challenge(r *http.Request, invalid bool) string {
	c := `Bearer resource_metadata="` + res.MetadataURL(r) + `"`
	if invalid {
		c += `, error="invalid_token"`
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
