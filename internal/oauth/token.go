package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// grant is what a principal was given: its tokens, and what a refresh
// needs, so that any replica can refresh it.
type grant struct {
	Access   string       `json:"a"`
	Refresh  string       `json:"r,omitempty"`
	Expires  time.Time    `json:"e,omitzero"` // zero: the server did not say
	Scopes   []string     `json:"s,omitempty"`
	Resource string       `json:"res"` // what it is for (RFC 8707)
	Token    string       `json:"t"`   // the token endpoint
	Reg      registration `json:"g"`
}

// refreshAhead is how long before its expiry a token is refreshed, and
// refreshTimeout how long a refresh may take.
const (
	refreshAhead   = time.Minute
	refreshTimeout = 30 * time.Second
)

// maxLifetime bounds the lifetime a token endpoint states (expires_in).
const maxLifetime = 365 * 24 * time.Hour

// refusedError is a token endpoint's refusal (RFC 6749 §5.2), as opposed
// to a failure to reach it.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// grantKeep is how long a grant without a known end is kept.
const grantKeep = 90 * 24 * time.Hour

func (g *grant) due(now time.Time) bool {
	return !g.Expires.IsZero() && now.After(g.Expires.Add(-refreshAhead))
}

// keep stores principal's grant, in memory and in the store.
func (c *Client) keep(ctx context.Context, principal string, g *grant) error {
	c.mu.Lock()
	if len(c.grants) >= maxGrantsInMemory {
		c.grants = map[string]*grant{}
	}
	c.grants[principal] = g
	c.mu.Unlock()
	ttl := grantKeep
	if !g.Expires.IsZero() && g.Refresh == "" {
		ttl = time.Until(g.Expires)
	}
	return c.save(ctx, c.grantKey(principal), principal, g, max(ttl, time.Second))
}

// drop forgets principal's grant everywhere.
func (c *Client) drop(ctx context.Context, principal string) {
	c.mu.Lock()
	delete(c.grants, principal)
	c.mu.Unlock()
	_ = c.o.Store.Delete(ctx, c.grantKey(principal))
}

// current returns principal's grant, refreshed first when it is due (once
// for all its concurrent requests); nil when there is none.
func (c *Client) current(ctx context.Context, principal string) (*grant, error) {
	c.mu.Lock()
	g := c.grants[principal]
	c.mu.Unlock()
	if g == nil {
		var stored grant
		if err := c.load(ctx, c.grantKey(principal), principal, &stored); err == nil {
			g = &stored
			c.mu.Lock()
			c.grants[principal] = g
			c.mu.Unlock()
		}
	}
	switch {
	case c.o.Mode == ModeClientCredentials && (g == nil || g.due(time.Now())):
		return c.renew(ctx, principal, nil)
	case g != nil && g.due(time.Now()) && g.Refresh != "":
		return c.renew(ctx, principal, g)
	case g != nil && !g.Expires.IsZero() && time.Now().After(g.Expires):
		c.drop(ctx, principal)
		return nil, nil
	}
	return g, nil
}

// renew replaces stale, refreshing it, or (client credentials) asking for
// a new grant. A refresh the server refuses drops the grant, and the user
// is asked again; one that cannot be had (the server unreachable or
// failing) keeps it, and the request fails. The refresh is shared by the
// principal's concurrent requests, so none of them leaving ends it, and
// the grant it makes is stored under the flight's own context.
//
// Another replica, or a request of this one's that saw stale earlier, may
// have refreshed already: the store then holds a newer grant, and stale's
// refresh token may be spent (servers rotate them, and may revoke the
// whole grant when a spent one comes back). So the store is read first,
// and a newer grant there is taken instead, refreshed only if it is due
// itself; and a refusal drops the grant only if the store still holds the
// one refused.
func (c *Client) renew(ctx context.Context, principal string, stale *grant) (*grant, error) {
	v, err, _ := c.refresh.Do(principal, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
		defer cancel()
		if c.o.Mode == ModeClientCredentials {
			g, err := c.clientCredentials(ctx)
			if err != nil {
				return nil, err
			}
			return c.kept(ctx, principal, g), nil
		}
		if newer := c.newer(ctx, principal, stale); newer != nil {
			if !newer.due(time.Now()) {
				return c.kept(ctx, principal, newer), nil
			}
			stale = newer
		}
		form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {stale.Refresh}, "resource": {stale.Resource}}
		g, err := c.requestToken(ctx, stale.Token, stale.Reg, form)
		var refused *refusedError
		if errors.As(err, &refused) {
			if newer := c.newer(ctx, principal, stale); newer != nil {
				return c.kept(ctx, principal, newer), nil // refreshed elsewhere meanwhile
			}
			c.log.Info("oauth: a refresh was refused; the user will be asked again", "err", err)
			c.drop(ctx, principal)
			return (*grant)(nil), nil
		}
		if err != nil {
			return nil, fmt.Errorf("refreshing the token: %w", err)
		}
		if g.Refresh == "" {
			g.Refresh = stale.Refresh // the server keeps the one it issued
		}
		g.Resource = stale.Resource
		if len(g.Scopes) == 0 {
			g.Scopes = stale.Scopes
		}
		return c.kept(ctx, principal, g), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*grant), nil
}

// newer is the grant the store holds for principal when it is not stale
// (another access token), nil otherwise.
func (c *Client) newer(ctx context.Context, principal string, stale *grant) *grant {
	var stored grant
	if err := c.load(ctx, c.grantKey(principal), principal, &stored); err != nil || stored.Access == stale.Access {
		return nil
	}
	return &stored
}

// kept is g (the flight's answer), kept here and in the store.
func (c *Client) kept(ctx context.Context, principal string, g *grant) *grant {
	if err := c.keep(ctx, principal, g); err != nil {
		c.log.Warn("oauth: keeping a refreshed token failed", "err", err)
	}
	return g
}

// requestToken posts form to the token endpoint, authenticated as reg
// says, and reads the grant.
func (c *Client) requestToken(ctx context.Context, endpoint string, reg registration, form url.Values) (*grant, error) {
	req, err := c.tokenRequest(ctx, endpoint, reg, form)
	if err != nil {
		return nil, err
	}
	resp, err := c.o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("token request: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes))
	if resp.StatusCode != http.StatusOK {
		e := tokenError(body)
		err := fmt.Errorf("token request: HTTP %d: %s", resp.StatusCode, e)
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnauthorized {
			c.forgetDeadClient(ctx, reg, e.Error)
			return nil, &refusedError{err} // RFC 6749 §5.2: the grant or the client is not accepted
		}
		return nil, err
	}
	var t struct {
		AccessToken  string  `json:"access_token"`
		TokenType    string  `json:"token_type"`
		ExpiresIn    float64 `json:"expires_in"`
		RefreshToken string  `json:"refresh_token"`
		Scope        string  `json:"scope"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.AccessToken == "" {
		return nil, errors.New("token request: no access_token in the answer")
	}
	if t.TokenType != "" && !strings.EqualFold(t.TokenType, "Bearer") {
		return nil, fmt.Errorf("token request: token type %q, not Bearer", t.TokenType)
	}
	g := &grant{Access: t.AccessToken, Refresh: t.RefreshToken, Scopes: strings.Fields(t.Scope), Token: endpoint, Reg: reg}
	if t.ExpiresIn > 0 {
		// Held to a year: a larger figure would overflow a Duration into
		// the past, and a token is refreshed within a year anyway.
		g.Expires = time.Now().Add(time.Duration(min(t.ExpiresIn, maxLifetime.Seconds()) * float64(time.Second)))
	}
	return g, nil
}

// refusal is a token endpoint's error answer, as RFC 6749 §5.2 has it.
type refusal struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// tokenError reads an error answer for what it may say: its error and
// description (bounded), never the rest of the body, which may echo a
// token.
func tokenError(body []byte) refusal {
	var e refusal
	if json.Unmarshal(body, &e) != nil {
		return refusal{Error: fmt.Sprintf("(an answer of %d bytes, not JSON)", len(body))}
	}
	e.Error, e.Description = cut(e.Error, 64), cut(e.Description, 200)
	return e
}

// cut is s, at most n bytes of it, ending on a whole character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func (e refusal) String() string {
	if e.Description == "" {
		return e.Error
	}
	return e.Error + ": " + e.Description
}

// tokenRequest builds the token request, with the client authentication
// reg registered (RFC 6749 §2.3, RFC 7523 for private_key_jwt).
func (c *Client) tokenRequest(ctx context.Context, endpoint string, reg registration, form url.Values) (*http.Request, error) {
	switch reg.AuthMethod {
	case "client_secret_post":
		form.Set("client_id", reg.ClientID)
		form.Set("client_secret", reg.ClientSecret)
	case "private_key_jwt":
		assertion, err := c.assertion(reg, endpoint)
		if err != nil {
			return nil, err
		}
		form.Set("client_id", reg.ClientID)
		form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
		form.Set("client_assertion", assertion)
	case "client_secret_basic":
	default: // none
		form.Set("client_id", reg.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if reg.AuthMethod == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(reg.ClientID), url.QueryEscape(reg.ClientSecret))
	}
	return req, nil
}

// clientCredentials asks for Manifold's own token (the
// io.modelcontextprotocol/oauth-client-credentials extension).
func (c *Client) clientCredentials(ctx context.Context) (*grant, error) {
	d, err := c.discover(ctx, challenge{})
	if err != nil {
		return nil, err
	}
	reg := registration{Issuer: d.server.Issuer, ClientID: c.o.ClientID, ClientSecret: c.o.ClientSecret, AuthMethod: "client_secret_basic"}
	if c.o.PrivateKey != nil {
		reg.AuthMethod = "private_key_jwt"
	}
	form := url.Values{"grant_type": {"client_credentials"}, "resource": {d.resource}}
	scopes := d.scopes
	if len(scopes) == 0 {
		scopes = c.o.Scopes
	}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	g, err := c.requestToken(ctx, d.server.TokenEndpoint, reg, form)
	if g != nil {
		g.Resource = d.resource
	}
	return g, err
}

// assertion is a private_key_jwt client assertion: issued by and about the
// client, for the authorization server, short-lived and used once.
func (c *Client) assertion(reg registration, endpoint string) (string, error) {
	alg, err := algorithmOf(c.o.PrivateKey)
	if err != nil {
		return "", err
	}
	now := time.Now()
	tok, err := jwt.NewBuilder().Issuer(reg.ClientID).Subject(reg.ClientID).Audience([]string{reg.Issuer}).
		JwtID(randomToken()).IssuedAt(now).Expiration(now.Add(time.Minute)).Build()
	if err != nil {
		return "", err
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(alg, c.o.PrivateKey))
	if err != nil {
		return "", fmt.Errorf("signing the client assertion: %w", err)
	}
	return string(signed), nil
}

// algorithmOf is the signature algorithm a key implies.
func algorithmOf(k any) (jwa.SignatureAlgorithm, error) {
	switch key := k.(type) {
	case *rsa.PrivateKey:
		return jwa.RS256(), nil
	case *ecdsa.PrivateKey:
		switch key.Curve.Params().BitSize {
		case 256:
			return jwa.ES256(), nil
		case 384:
			return jwa.ES384(), nil
		}
		return jwa.ES512(), nil
	case ed25519.PrivateKey:
		return jwa.EdDSA(), nil
	}
	return jwa.SignatureAlgorithm{}, fmt.Errorf("a private key of type %T cannot sign a client assertion", k)
}
