package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/manifold-mcp/manifold/internal/loopback"
)

// challenge is what a server's WWW-Authenticate: Bearer (or DPoP) says.
type challenge struct {
	ResourceMetadata string
	Scope            string
	Error            string
	// DPoP is set when the server challenges for DPoP only (RFC 9449
	// §7.1): it takes no bearer token.
	DPoP bool
}

// parseChallenge reads the Bearer or DPoP challenge of a 401 or 403 (RFC
// 6750 §3, RFC 9449 §7.1, RFC 9728 §5.1): its auth-params, quoted or not.
// A server offering both is read as Bearer's.
func parseChallenge(h http.Header) challenge {
	var c challenge
	bearer := false
	for _, v := range h.Values("WWW-Authenticate") {
		scheme, params, _ := strings.Cut(strings.TrimSpace(v), " ")
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			bearer, c.DPoP = true, false
		case strings.EqualFold(scheme, "DPoP") && !bearer:
			c.DPoP = true
		default:
			continue
		}
		for k, val := range authParams(params) {
			switch strings.ToLower(k) {
			case "resource_metadata":
				c.ResourceMetadata = val
			case "scope":
				c.Scope = val
			case "error":
				c.Error = val
			}
		}
	}
	return c
}

// authParams splits `a="x, y", b=z` into its parameters.
func authParams(s string) map[string]string {
	out := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimLeft(strings.TrimSpace(s), ",") {
		s = strings.TrimSpace(s)
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			return out
		}
		k, rest = strings.TrimSpace(k), strings.TrimSpace(rest)
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := 1
			for end < len(rest) && rest[end] != '"' {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			v = strings.ReplaceAll(rest[1:min(end, len(rest))], `\"`, `"`)
			rest = rest[min(end+1, len(rest)):]
		} else {
			v, rest, _ = strings.Cut(rest, ",")
			v = strings.TrimSpace(v)
		}
		out[k] = v
		s = rest
	}
	return out
}

// resourceMetadata is RFC 9728's protected resource metadata, the part a
// client reads.
type resourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
	DPoPRequired         bool     `json:"dpop_bound_access_tokens_required"`
}

// serverMetadata is an authorization server's metadata (RFC 8414, or
// OpenID Connect discovery), the part a client reads.
type serverMetadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	ScopesSupported                   []string `json:"scopes_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocumentSupported bool     `json:"client_id_metadata_document_supported"`
	IssParameterSupported             bool     `json:"authorization_response_iss_parameter_supported"`
	DPoPAlgs                          []string `json:"dpop_signing_alg_values_supported"`
}

// maxMetadataBytes bounds a metadata document or a token response.
const maxMetadataBytes = 1 << 20

// discovery is what discovery found for one challenge: the authorization
// server to ask, the resource identifier its tokens are for (the resource
// metadata's, as written there), and the scopes the resource names.
type discovery struct {
	server   *serverMetadata
	resource string
	scopes   []string // the challenge's, else the resource's scopes_supported
	dpop     bool     // the server requires DPoP-bound tokens
}

// discover finds the authorization server of the upstream after ch, as the
// MCP authorization specification orders it.
func (c *Client) discover(ctx context.Context, ch challenge) (*discovery, error) {
	prm, err := c.resourceMetadata(ctx, ch)
	if errors.Is(err, errNoResourceMetadata) {
		// A 2025-03-26 server: its own origin is the authorization server.
		as, err := c.legacyServer(ctx)
		if err != nil {
			return nil, err
		}
		return &discovery{server: as, resource: c.o.Resource, scopes: strings.Fields(ch.Scope), dpop: ch.DPoP}, nil
	}
	if err != nil {
		return nil, err
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, fmt.Errorf("the protected resource metadata names no authorization server")
	}
	if err := secure("the authorization server", prm.AuthorizationServers[0]); err != nil {
		return nil, err
	}
	as, err := c.serverMetadata(ctx, prm.AuthorizationServers[0])
	if err != nil {
		return nil, err
	}
	d := &discovery{server: as, resource: prm.Resource, scopes: strings.Fields(ch.Scope), dpop: ch.DPoP || prm.DPoPRequired}
	if len(d.scopes) == 0 {
		d.scopes = prm.ScopesSupported
	}
	return d, nil
}

var errNoResourceMetadata = errors.New("no protected resource metadata")

// resourceMetadata is the protected resource metadata the challenge names,
// else the one at the path-aware well-known URL, else at the root; its
// resource must be the upstream's URL, or nothing is asked.
func (c *Client) resourceMetadata(ctx context.Context, ch challenge) (*resourceMetadata, error) {
	u, err := url.Parse(c.o.Resource)
	if err != nil {
		return nil, err
	}
	var candidates []string
	if ch.ResourceMetadata != "" {
		if err := secure("the challenge's resource_metadata", ch.ResourceMetadata); err != nil {
			return nil, err
		}
		candidates = append(candidates, ch.ResourceMetadata)
	}
	base := u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource"
	if p := strings.TrimSuffix(u.EscapedPath(), "/"); p != "" {
		candidates = append(candidates, base+p)
	}
	candidates = append(candidates, base)
	for _, at := range candidates {
		var m resourceMetadata
		found, err := c.getJSON(ctx, at, &m)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if !covers(m.Resource, c.o.Resource) {
			return nil, fmt.Errorf("the protected resource metadata at %s is for %q, which is not %q: not asking for a token", at, m.Resource, c.o.Resource)
		}
		return &m, nil
	}
	return nil, errNoResourceMetadata
}

// covers reports whether the resource identifier resource names the
// server at target: the same origin, and a path that is target's or one
// above it (a server's metadata may name its origin), never another's.
func covers(resource, target string) bool {
	r, err1 := url.Parse(resource)
	t, err2 := url.Parse(target)
	if err1 != nil || err2 != nil || r.Fragment != "" || !strings.EqualFold(r.Scheme, t.Scheme) || !strings.EqualFold(r.Host, t.Host) {
		return false
	}
	rp, tp := strings.TrimSuffix(r.EscapedPath(), "/"), strings.TrimSuffix(t.EscapedPath(), "/")
	return rp == tp || strings.HasPrefix(tp, rp+"/")
}

// serverMetadata fetches issuer's metadata by RFC 8414 then OpenID
// discovery (inserting the well-known segment before an issuer's path, as
// both specify, and for OpenID also after it), and checks that it is the
// issuer's own (RFC 8414 §3.3).
func (c *Client) serverMetadata(ctx context.Context, issuer string) (*serverMetadata, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("authorization server %q is not a URL", issuer)
	}
	origin, p := u.Scheme+"://"+u.Host, strings.TrimSuffix(u.EscapedPath(), "/")
	candidates := []string{origin + "/.well-known/oauth-authorization-server" + p, origin + "/.well-known/openid-configuration" + p}
	if p != "" {
		candidates = append(candidates, origin+p+"/.well-known/openid-configuration")
	}
	for _, at := range candidates {
		var m serverMetadata
		found, err := c.getJSON(ctx, at, &m)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if m.Issuer != issuer {
			return nil, fmt.Errorf("the authorization server metadata at %s names issuer %q, not %q: not registering or asking", at, m.Issuer, issuer)
		}
		return &m, checkServer(&m)
	}
	return nil, fmt.Errorf("no metadata for authorization server %s", issuer)
}

// legacyServer is the authorization server of a 2025-03-26 server, which
// publishes no resource metadata: its origin's RFC 8414 metadata, else the
// default endpoints there.
func (c *Client) legacyServer(ctx context.Context) (*serverMetadata, error) {
	u, err := url.Parse(c.o.Resource)
	if err != nil {
		return nil, err
	}
	origin := u.Scheme + "://" + u.Host
	var m serverMetadata
	found, err := c.getJSON(ctx, origin+"/.well-known/oauth-authorization-server", &m)
	if err != nil {
		return nil, err
	}
	if found {
		return &m, checkServer(&m)
	}
	m = serverMetadata{Issuer: origin, AuthorizationEndpoint: origin + "/authorize", TokenEndpoint: origin + "/token", RegistrationEndpoint: origin + "/register"}
	return &m, checkServer(&m)
}

// checkServer refuses metadata a client cannot work with, or must not:
// an endpoint that is not https (http only on a loopback host), where
// codes, verifiers, secrets and tokens would travel in clear, or that is
// no web URL at all (a javascript: link shown to the user).
func checkServer(m *serverMetadata) error {
	if m.TokenEndpoint == "" {
		return fmt.Errorf("authorization server %s names no token endpoint", m.Issuer)
	}
	for _, e := range []struct{ name, url string }{
		{"authorization_endpoint", m.AuthorizationEndpoint}, {"token_endpoint", m.TokenEndpoint}, {"registration_endpoint", m.RegistrationEndpoint},
	} {
		if e.url == "" {
			continue
		}
		if err := secure("authorization server "+m.Issuer+"'s "+e.name, e.url); err != nil {
			return err
		}
	}
	if len(m.CodeChallengeMethodsSupported) > 0 && !slices.Contains(m.CodeChallengeMethodsSupported, "S256") {
		return fmt.Errorf("authorization server %s does not support PKCE S256", m.Issuer)
	}
	return nil
}

// secure refuses raw, named what, unless it is an absolute https URL, or
// http on a loopback host: the MCP authorization specification serves
// every authorization server endpoint over https. It is checked before
// anything is fetched from it.
func secure(what, raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("%s %q is not https: not an absolute URL", what, raw)
	case !loopback.Secure(u):
		return fmt.Errorf("%s %q is not https (http only on a loopback host): not asking it for anything", what, raw)
	}
	return nil
}

// getJSON fetches a metadata document: found is false on 404 (or another
// 4xx), so the next candidate is tried.
func (c *Client) getJSON(ctx context.Context, at string, v any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, at, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.o.HTTP.Do(req)
	if err != nil {
		return false, fmt.Errorf("fetching %s: %w", at, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		return false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("fetching %s: HTTP %d", at, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadataBytes)).Decode(v); err != nil {
		return false, fmt.Errorf("%s: %w", at, err)
	}
	return true, nil
}
