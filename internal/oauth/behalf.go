package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/clip"
)

// Modes in which Manifold gets the upstream's token itself, without a
// consent: for the caller, exchanging its own token at the organization's
// security token service (exchange, RFC 8693) or its identity provider
// (enterprise: an ID-JAG presented with the JWT bearer grant); or for
// itself, with its workload's JWT as the assertion (workload, RFC 7523).
const (
	ModeExchange   = "exchange"
	ModeEnterprise = "enterprise"
	ModeWorkload   = "workload"
)

// IdP is Manifold's registration at an organization's identity provider
// (mode enterprise): ClientID is the audience of the callers' ID tokens.
type IdP struct {
	TokenEndpoint string
	ClientID      string
	ClientSecret  string
}

// Grant types and token types (RFC 8693 §3, RFC 7523, the ID-JAG draft).
const (
	grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	grantJWTBearer     = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	typeAccessToken    = "urn:ietf:params:oauth:token-type:access_token"
	typeIDToken        = "urn:ietf:params:oauth:token-type:id_token"
	typeIDJAG          = "urn:ietf:params:oauth:token-type:id-jag"
)

// ServiceRetryAfter is when a caller whose token service was down should
// try again.
const ServiceRetryAfter = 5 * time.Second

// RefusedError is a token service's refusal (RFC 6749 §5.2) of what
// Manifold asked for an upstream's token: the caller's token is not
// accepted there, or Manifold's registration is wrong. Its text, bounded
// and scrubbed of anything shaped like a token, is the caller's to read.
type RefusedError struct {
	Upstream string
	Service  string // which one refused: "token service", "identity provider", "authorization server"
	Refusal  string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("upstream %s: the %s refused the token request: %s", e.Upstream, e.Service, e.Refusal)
}

// ServiceDownError is a token service that could not answer (unreachable,
// timed out, or failing with 5xx): the caller's token may be good, and
// the caller should come back after ServiceRetryAfter.
type ServiceDownError struct {
	Upstream string
	Service  string
	Err      error
}

func (e *ServiceDownError) Error() string {
	return fmt.Sprintf("upstream %s: the %s is unavailable: %v", e.Upstream, e.Service, e.Err)
}
func (e *ServiceDownError) Unwrap() error { return e.Err }

// PerPrincipal reports whether each caller has its own grant (modes user,
// exchange and enterprise), so that the upstream is called per principal.
func (c *Client) PerPrincipal() bool {
	return c.o.Mode == ModeUser || c.o.Mode == ModeExchange || c.o.Mode == ModeEnterprise
}

// obtain asks for a new grant, in a mode that needs no consent.
func (c *Client) obtain(ctx context.Context) (*grant, error) {
	switch c.o.Mode {
	case ModeExchange:
		return c.exchange(ctx)
	case ModeEnterprise:
		return c.enterprise(ctx)
	case ModeWorkload:
		return c.workload(ctx)
	}
	return c.clientCredentials(ctx)
}

// failed tells a token service's refusal from its absence.
func (c *Client) failed(service string, err error) error {
	var refused *refusedError
	if errors.As(err, &refused) {
		return &RefusedError{Upstream: c.o.Upstream, Service: service, Refusal: refused.refusal.String()}
	}
	return &ServiceDownError{Upstream: c.o.Upstream, Service: service, Err: err}
}

// credential is the caller's token, which exchange and enterprise need
// for a grant they do not hold: work done for no caller (a session ended
// in the background) goes without.
func (c *Client) credential(ctx context.Context) (auth.Credential, error) {
	cred, ok := auth.CredentialFrom(ctx)
	if !ok {
		return cred, fmt.Errorf("upstream %s: oauth mode %s needs the caller's token, and this request has none", c.o.Upstream, c.o.Mode)
	}
	return cred, nil
}

// ownRegistration is Manifold's configured client at issuer: a private
// key, else a secret (Basic), else its id alone.
func (c *Client) ownRegistration(issuer, method string) registration {
	reg := registration{Issuer: issuer, ClientID: c.o.ClientID, ClientSecret: c.o.ClientSecret, AuthMethod: method}
	switch {
	case c.o.PrivateKey != nil:
		reg.AuthMethod = "private_key_jwt"
	case c.o.ClientSecret == "":
		reg.AuthMethod = "none"
	}
	return reg
}

// exchange trades the caller's token at the security token service for
// one for the upstream (RFC 8693): Manifold authenticates as its client
// there, and the caller's token goes nowhere else.
func (c *Client) exchange(ctx context.Context) (*grant, error) {
	cred, err := c.credential(ctx)
	if err != nil {
		return nil, err
	}
	audience := c.o.Audience
	if audience == "" {
		audience = c.o.Resource
	}
	form := url.Values{"grant_type": {grantTokenExchange},
		"subject_token": {cred.Reveal()}, "subject_token_type": {typeAccessToken},
		"requested_token_type": {typeAccessToken}, "resource": {c.o.Resource}, "audience": {audience}}
	c.withScopes(form)
	g, err := c.requestToken(ctx, c.o.TokenEndpoint, c.ownRegistration(c.o.TokenEndpoint, "client_secret_basic"), form)
	if err != nil {
		return nil, c.failed("token service", err)
	}
	g.Resource, g.Refresh = c.o.Resource, "" // a new exchange, not a refresh, renews it
	return g, nil
}

// enterprise trades the caller's ID token at the identity provider for an
// ID-JAG naming the upstream's authorization server and resource, and
// presents that there with the JWT bearer grant: no consent screen, the
// identity provider decides. The ID-JAG is used once, never kept.
func (c *Client) enterprise(ctx context.Context) (*grant, error) {
	cred, err := c.credential(ctx)
	if err != nil {
		return nil, err
	}
	d, err := c.discover(ctx, challenge{})
	if err != nil {
		return nil, fmt.Errorf("upstream %s: authorization discovery: %w", c.o.Upstream, err)
	}
	form := url.Values{"grant_type": {grantTokenExchange},
		"subject_token": {cred.Reveal()}, "subject_token_type": {typeIDToken},
		"requested_token_type": {typeIDJAG}, "audience": {d.server.Issuer}, "resource": {d.resource}}
	c.withScopes(form)
	idp := registration{Issuer: c.o.IdP.TokenEndpoint, ClientID: c.o.IdP.ClientID, ClientSecret: c.o.IdP.ClientSecret, AuthMethod: "none"}
	if idp.ClientSecret != "" {
		idp.AuthMethod = "client_secret_basic"
	}
	jag, err := c.exchanged(ctx, idp, form, typeIDJAG)
	if err != nil {
		return nil, c.failed("identity provider", err)
	}
	return c.jwtBearer(ctx, d, jag)
}

// workload presents Manifold's own workload JWT with the JWT bearer grant,
// once: a refusal is reported, neither retried nor answered with another
// grant.
func (c *Client) workload(ctx context.Context) (*grant, error) {
	assertion, err := readAssertion(c.o.AssertionFile)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", c.o.Upstream, err)
	}
	d, err := c.discover(ctx, challenge{})
	if err != nil {
		return nil, fmt.Errorf("upstream %s: authorization discovery: %w", c.o.Upstream, err)
	}
	return c.jwtBearer(ctx, d, assertion)
}

// jwtBearer asks d's authorization server for the upstream's token with
// assertion (RFC 7523 §2.1), authenticated as the configured client.
func (c *Client) jwtBearer(ctx context.Context, d *discovery, assertion string) (*grant, error) {
	reg := c.ownRegistration(d.server.Issuer, c.authMethod(d.server, c.o.ClientSecret != ""))
	form := url.Values{"grant_type": {grantJWTBearer}, "assertion": {assertion}, "resource": {d.resource}}
	c.withScopes(form)
	g, err := c.requestToken(ctx, d.server.TokenEndpoint, reg, form)
	if err != nil {
		return nil, c.failed("authorization server", err)
	}
	g.Resource, g.Refresh = d.resource, ""
	return g, nil
}

func (c *Client) withScopes(form url.Values) {
	if len(c.o.Scopes) > 0 {
		form.Set("scope", strings.Join(c.o.Scopes, " "))
	}
}

// exchanged posts a token exchange whose result is no access token (an
// ID-JAG): it must be of type want, and is returned, not kept.
func (c *Client) exchanged(ctx context.Context, reg registration, form url.Values, want string) (string, error) {
	status, body, _, err := c.postToken(ctx, reg.Issuer, reg, form, nil)
	if err != nil {
		return "", err
	}
	if err := notGranted(status, body); err != nil {
		return "", err
	}
	var t struct {
		AccessToken     string `json:"access_token"`
		IssuedTokenType string `json:"issued_token_type"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.AccessToken == "" {
		return "", errors.New("token exchange: no access_token in the answer")
	}
	if t.IssuedTokenType != want {
		return "", &refusedError{refusal: refusal{Error: "unexpected issued_token_type", Description: clip.Text(scrub(t.IssuedTokenType), 100)},
			err: fmt.Errorf("token exchange: issued %q, not %q", clip.Text(scrub(t.IssuedTokenType), 100), want)}
	}
	return t.AccessToken, nil
}

// maxAssertionBytes bounds a workload JWT.
const maxAssertionBytes = 16 << 10

// readAssertion reads the workload JWT afresh: the platform rotates it.
func readAssertion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading the workload assertion: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAssertionBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the workload assertion: %w", err)
	}
	s := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxAssertionBytes:
		return "", fmt.Errorf("the workload assertion %s is over %d bytes", path, maxAssertionBytes)
	case s == "" || strings.Count(s, ".") != 2:
		return "", fmt.Errorf("the workload assertion %s is not a JWT", path)
	}
	return s, nil
}
