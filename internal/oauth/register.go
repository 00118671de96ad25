package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/manifold-mcp/manifold/internal/loopback"
)

// registration is the client's registration with one authorization server:
// a client id is the issuer's alone, and never shown to another.
type registration struct {
	Issuer       string `json:"iss"`
	ClientID     string `json:"id"`
	ClientSecret string `json:"secret,omitempty"`
	// AuthMethod is how the client authenticates at the token endpoint:
	// client_secret_basic, client_secret_post, none, private_key_jwt.
	AuthMethod string `json:"auth"`
	// Version is a dynamic registration's, in the store (when it was
	// made): only the registration found dead is forgotten, never one
	// made again since.
	Version int64 `json:"ver,omitempty"`
	// Native is true for a registration as a native application (see
	// native): one kept from before Manifold registered so is
	// not used for a loopback redirect URI, whose port then varies.
	Native bool `json:"native,omitempty"`
}

// register returns the client's registration with as, in the order the
// MCP authorization specification gives: the configured client id, else
// the Client ID Metadata Document where the server supports it, else
// dynamic client registration (kept in the store, per issuer, for every
// replica).
func (c *Client) register(ctx context.Context, as *serverMetadata) (registration, error) {
	switch {
	case c.o.ClientID != "":
		return registration{Issuer: as.Issuer, ClientID: c.o.ClientID, ClientSecret: c.o.ClientSecret, AuthMethod: c.authMethod(as, c.o.ClientSecret != "")}, nil
	case c.o.MetadataURL != "" && as.ClientIDMetadataDocumentSupported:
		return registration{Issuer: as.Issuer, ClientID: c.o.MetadataURL, AuthMethod: "none"}, nil
	case as.RegistrationEndpoint == "":
		return registration{}, fmt.Errorf("authorization server %s offers no dynamic registration, and no client_id is configured", as.Issuer)
	}
	key := c.registrationKey(as.Issuer)
	var reg registration
	if err := c.load(ctx, key, "", &reg); err == nil && reg.Native == c.native() {
		return reg, nil
	}
	reg, err := c.registerDynamically(ctx, as)
	if err != nil {
		return registration{}, err
	}
	reg.Version = time.Now().UnixNano()
	if _, err := c.save(ctx, key, "", reg, reg.Version, registrationTTL); err != nil {
		c.log.Warn("oauth: keeping a registration failed; the next one registers again", "err", err)
	}
	return reg, nil
}

// registrationKey is where the dynamic registration with issuer is kept.
func (c *Client) registrationKey(issuer string) string { return "reg:" + c.digest + ":" + issuer }

// forgetDeadClient forgets the dynamic registration reg when the token
// endpoint answered code invalid_client (RFC 6749 §5.2: the server does not
// know the client, or no longer): the next consent registers again, on
// every replica, instead of sending users to a dead client id until the
// kept registration expires; only that registration, never one another
// replica has made since. A configured client id is the operator's to
// mend, and is not registered dynamically.
func (c *Client) forgetDeadClient(ctx context.Context, reg registration, code string) {
	if code != "invalid_client" || c.o.ClientID != "" || reg.ClientID == c.o.MetadataURL {
		return
	}
	c.log.Warn("oauth: the authorization server no longer knows Manifold's registration; the next consent registers again", "issuer", reg.Issuer)
	_ = c.o.Store.Drop(ctx, c.registrationKey(reg.Issuer), reg.Version)
}

// registrationTTL is how long a dynamic registration is kept.
const registrationTTL = 30 * 24 * time.Hour

// authMethod chooses how to authenticate at as's token endpoint: with a
// secret, client_secret_basic unless the server supports only
// client_secret_post; without one, none.
func (c *Client) authMethod(as *serverMetadata, secret bool) string {
	switch {
	case !secret:
		return "none"
	case len(as.TokenEndpointAuthMethodsSupported) == 0 || slices.Contains(as.TokenEndpointAuthMethodsSupported, "client_secret_basic"):
		return "client_secret_basic"
	case slices.Contains(as.TokenEndpointAuthMethodsSupported, "client_secret_post"):
		return "client_secret_post"
	}
	return "client_secret_basic"
}

// native reports whether Manifold registers as a native application: when
// its callback is an http URL of a loopback host, that of manifold stdio
// (or of a Manifold on its user's machine). manifold stdio listens on a
// port the system picks at each start, and keeps its registration across
// starts (FileStore): an authorization server accepts any port of a
// native client's loopback redirect URI (RFC 8252 §7.3, as
// OpenID Connect Dynamic Registration's application_type "native" asks),
// but only the exact URI registered by a web one, which would refuse
// every consent after the first start's.
func (c *Client) native() bool {
	u, err := url.Parse(c.o.RedirectURI)
	return err == nil && u.Scheme == "http" && loopback.Host(u.Hostname())
}

// registerDynamically registers with RFC 7591, as an application whose
// redirect is Manifold's callback: native on a loopback host, else web.
func (c *Client) registerDynamically(ctx context.Context, as *serverMetadata) (registration, error) {
	method := "none"
	if m := as.TokenEndpointAuthMethodsSupported; len(m) > 0 && !slices.Contains(m, "none") {
		method = c.authMethod(as, true)
	}
	native, appType := c.native(), "web"
	if native {
		appType = "native"
	}
	body, _ := json.Marshal(map[string]any{
		"client_name":                c.o.ClientName,
		"redirect_uris":              []string{c.o.RedirectURI},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": method,
		"application_type":           appType,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, as.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return registration{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.o.HTTP.Do(req)
	if err != nil {
		return registration{}, fmt.Errorf("registering with %s: %w", as.Issuer, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return registration{}, fmt.Errorf("registering with %s: HTTP %d: %s", as.Issuer, resp.StatusCode, bytes.TrimSpace(b))
	}
	var r struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		AuthMethod   string `json:"token_endpoint_auth_method"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadataBytes)).Decode(&r); err != nil || r.ClientID == "" {
		return registration{}, fmt.Errorf("registering with %s: no client_id in the answer", as.Issuer)
	}
	reg := registration{Issuer: as.Issuer, ClientID: r.ClientID, ClientSecret: r.ClientSecret, AuthMethod: r.AuthMethod, Native: native}
	if reg.AuthMethod == "" {
		reg.AuthMethod = method
		if r.ClientSecret != "" && method == "none" {
			reg.AuthMethod = "client_secret_basic"
		}
	}
	return reg, nil
}
