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

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/manifold-mcp/manifold/internal/clip"
)

// grant is what a principal was given: its tokens, and what a refresh
// needs, so that any replica can refresh it.
type grant struct {
	Access   string       `json:"a"`
	Refresh  string       `json:"r,omitempty"`
	Issued   time.Time    `json:"i,omitzero"` // when the server answered
	Expires  time.Time    `json:"e,omitzero"` // zero: the server did not say
	Scopes   []string     `json:"s,omitempty"`
	Resource string       `json:"res"` // what it is for (RFC 8707)
	Token    string       `json:"t"`   // the token endpoint
	Reg      registration `json:"g"`
	// Version orders a principal's grants: a refresh's is above the one
	// it refreshed, a new consent's above any before it (see nextVersion).
	Version int64 `json:"v,omitempty"`
	// DPoP is the key the tokens are bound to (RFC 9449); nil for
	// bearer tokens.
	DPoP dpopKey `json:"k,omitempty"`
}

// refreshAhead is how long before its expiry a token is refreshed at most
// (a short-lived one, a fifth of its lifetime before), and refreshTimeout
// how long a refresh may take.
const (
	refreshAhead   = time.Minute
	refreshTimeout = 30 * time.Second
)

// maxLifetime bounds the lifetime a token endpoint states (expires_in).
const maxLifetime = 365 * 24 * time.Hour

// grantKeep is how long a grant without a known end is kept.
const grantKeep = 90 * 24 * time.Hour

// due reports whether g is to be refreshed: within refreshAhead of its
// expiry, or of a fifth of its lifetime for a token living less than five
// minutes (otherwise a token issued for under a minute would be due as
// soon as it was issued, and refreshed on every request).
func (g *grant) due(now time.Time) bool {
	if g.Expires.IsZero() {
		return false
	}
	ahead := refreshAhead
	if !g.Issued.IsZero() {
		ahead = min(ahead, g.Expires.Sub(g.Issued)/5)
	}
	return now.After(g.Expires.Add(-ahead))
}

// nextVersion is the version of a grant replacing one of version prev:
// above it, and above any grant issued before now on any replica (whose
// clocks agree to well within the time between two refreshes).
func nextVersion(prev int64) int64 { return max(prev+1, time.Now().UnixNano()) }

// keep holds g, principal's newest grant, here and in the store. A grant
// the store cannot take now (Redis failing) stays here, serving the
// principal's requests, and is stored once the store is back (flushSoon):
// the authorization server has issued it, and may have rotated away the
// refresh token the store still holds.
func (c *Client) keep(ctx context.Context, principal string, g *grant) *grant {
	kept := c.held.put(principal, g)
	if kept != g {
		return kept // a newer grant came meanwhile
	}
	if err := c.store(ctx, principal, g); err != nil {
		if c.held.unsave(principal, g) {
			c.log.Warn("oauth: the token store cannot keep a grant now; it is held in memory and stored when the store is back", "err", err)
			c.flushSoon()
		} else {
			c.log.Warn("oauth: the token store cannot keep a grant now, and too many wait for it; this one is held in memory only", "err", err)
		}
	}
	return g
}

// store writes g to the store, unless it holds a newer grant.
func (c *Client) store(ctx context.Context, principal string, g *grant) error {
	ttl := grantKeep
	if !g.Expires.IsZero() && g.Refresh == "" {
		ttl = time.Until(g.Expires)
	}
	_, err := c.save(ctx, c.grantKey(principal), principal, g, g.Version, max(ttl, time.Second))
	return err
}

// drop forgets principal's grant g, here and in the store, unless a newer
// one has replaced it.
func (c *Client) drop(ctx context.Context, principal string, g *grant) {
	c.held.remove(principal, g.Version)
	_ = c.o.Store.Drop(ctx, c.grantKey(principal), g.Version)
}

// stored is principal's grant in the store, held here from now on.
func (c *Client) stored(ctx context.Context, principal string) (*grant, error) {
	var g grant
	if err := c.load(ctx, c.grantKey(principal), principal, &g); err != nil {
		return nil, err
	}
	return c.held.put(principal, &g), nil
}

// current returns principal's grant, refreshed first when it is due (once
// for all its concurrent requests); nil when there is none. A store that
// fails, when this replica holds nothing of the principal's, fails the
// request rather than ask a user who has consented to consent again.
func (c *Client) current(ctx context.Context, principal string) (*grant, error) {
	g := c.held.get(principal)
	if g == nil {
		var err error
		g, err = c.stored(ctx, principal)
		if err != nil && !errors.Is(err, ErrNotFound) && c.o.Mode == ModeUser {
			return nil, fmt.Errorf("upstream %s: reading the caller's token: %w", c.o.Upstream, err)
		}
	}
	switch {
	case c.o.Mode != ModeUser && (g == nil || g.due(time.Now())): // no consent: asked for afresh
		return c.renew(ctx, principal, nil)
	case g != nil && g.due(time.Now()) && g.Refresh != "":
		return c.renew(ctx, principal, g)
	case g != nil && !g.Expires.IsZero() && time.Now().After(g.Expires):
		c.drop(ctx, principal, g)
		return nil, nil
	}
	return g, nil
}

// renew replaces stale, refreshing it, or (client credentials) asking for
// a new grant. A refresh the server refuses drops the grant, and the user
// is asked again; one that cannot be had (the server unreachable or
// failing, or answering anything but a refusal) keeps it, and the request
// fails. The refresh is shared by the principal's concurrent requests, so
// none of them leaving ends it, and the grant it makes is kept under the
// flight's own context.
//
// A newer grant than stale may exist: made by a request of this replica's
// that saw stale earlier, or by another replica. Then stale's refresh
// token may be spent (servers rotate them, and may revoke the whole grant
// when a spent one comes back). So the newest grant is found first, here
// then in the store, and refreshed only if it is due itself; a refresh
// token known to be spent is never sent; and a refusal drops the grant
// only while nothing newer has come.
func (c *Client) renew(ctx context.Context, principal string, stale *grant) (*grant, error) {
	v, err, _ := c.refresh.Do(principal, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
		defer cancel()
		if c.o.Mode != ModeUser {
			g, err := c.obtain(ctx)
			if err != nil {
				return nil, err
			}
			g.Version = nextVersion(0)
			return c.keep(ctx, principal, g), nil
		}
		if newer := c.newer(ctx, principal, stale); newer != nil {
			if !newer.due(time.Now()) {
				return newer, nil
			}
			stale = newer
		}
		if c.held.isSpent(stale.Refresh) {
			c.log.Warn("oauth: the newest grant known holds a refresh token already spent; the user will be asked again rather than send it")
			c.drop(ctx, principal, stale)
			return (*grant)(nil), nil
		}
		return c.leasedRefresh(ctx, principal, stale)
	})
	if err != nil {
		return nil, err
	}
	return v.(*grant), nil
}

// leaseWait is how often a replica waiting for another's refresh looks
// for the grant it stores.
const leaseWait = 50 * time.Millisecond

// leasedRefresh refreshes stale, the newest grant known, once for all the
// replicas sharing the store. The singleflight in renew makes it once per
// replica; across replicas, the one that takes the lease (a store entry
// of the grant's version, put only if absent, in one step) refreshes, and
// the others wait for the grant it stores (or its dropping, when the
// server refused the refresh: the user is asked again). Without it two replicas whose
// requests find the token due at once would both send its refresh token,
// and a server that rotates them takes the second use for a stolen token
// and revokes the whole grant. Whoever takes the lease looks for a newer
// grant again first: the lease may be free because its holder is done.
//
// A store that cannot be asked cannot say whether another replica is
// refreshing: a token that is due but not expired still serves (it is
// refreshed once the store is back, or once it expires); an expired one,
// or one the upstream refused (a grant not yet due is renewed only then),
// is refreshed, as no other replica can be waited for.
func (c *Client) leasedRefresh(ctx context.Context, principal string, stale *grant) (*grant, error) {
	key, lease := "lease:"+c.grantKey(principal), Versioned{Value: []byte("1"), Version: stale.Version + 1}
	for {
		took, err := c.o.Store.Put(ctx, key, lease, refreshTimeout)
		switch {
		case err != nil && stale.due(time.Now()) && time.Now().Before(stale.Expires):
			return stale, nil
		case err != nil:
			return c.refreshed(ctx, principal, stale)
		case took:
			defer func() { _ = c.o.Store.Drop(context.WithoutCancel(ctx), key, lease.Version) }()
			if newer := c.newer(ctx, principal, stale); newer != nil {
				return newer, nil
			}
			return c.refreshed(ctx, principal, stale)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for another replica's refresh of the token: %w", ctx.Err())
		case <-time.After(leaseWait):
		}
		switch g, err := c.stored(ctx, principal); {
		case errors.Is(err, ErrNotFound): // the refresh was refused there, and the grant dropped
			c.held.remove(principal, stale.Version)
			return nil, nil
		case err == nil && g.Version > stale.Version:
			return g, nil
		}
	}
}

// refreshed asks the token endpoint to refresh stale, the newest grant.
func (c *Client) refreshed(ctx context.Context, principal string, stale *grant) (*grant, error) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {stale.Refresh}, "resource": {stale.Resource}}
	g, err := c.requestBoundToken(ctx, stale.Token, stale.Reg, form, stale.DPoP)
	var refused *refusedError
	if errors.As(err, &refused) && refused.dead() {
		if newer := c.newer(ctx, principal, stale); newer != nil {
			return newer, nil // refreshed elsewhere meanwhile
		}
		c.log.Info("oauth: a refresh was refused; the user will be asked again", "refusal", refused.refusal.String())
		c.refreshFailed("refused: " + refused.refusal.String())
		c.drop(ctx, principal, stale)
		return nil, nil
	}
	if err != nil {
		c.refreshFailed(err.Error())
		return nil, fmt.Errorf("refreshing the token: %w", err)
	}
	if g.Refresh == "" {
		g.Refresh = stale.Refresh // the server keeps the one it issued
	} else if g.Refresh != stale.Refresh {
		c.held.markSpent(stale.Refresh)
	}
	g.Resource = stale.Resource
	if len(g.Scopes) == 0 {
		g.Scopes = stale.Scopes
	}
	g.Version = nextVersion(stale.Version)
	return c.keep(ctx, principal, g), nil
}

// newer is principal's grant newer than stale, held here or (then held
// here too) in the store; nil when there is none, or the store cannot say.
func (c *Client) newer(ctx context.Context, principal string, stale *grant) *grant {
	if g := c.held.get(principal); g != nil && g.Version > stale.Version {
		return g
	}
	if g, err := c.stored(ctx, principal); err == nil && g.Version > stale.Version {
		return g
	}
	return nil
}

// requestToken posts form to the token endpoint, authenticated as reg
// says, and reads the grant. A refusal (a *refusedError) is an answer of
// the authorization server itself, RFC 6749 §5.2's: HTTP 400 or 401 with a
// JSON error. Anything else that is not the grant (a redirect, which is
// never followed; a 5xx; a page of a proxy in between) is a failure to
// reach it, which says nothing of the grant.
func (c *Client) requestToken(ctx context.Context, endpoint string, reg registration, form url.Values) (*grant, error) {
	return c.requestBoundToken(ctx, endpoint, reg, form, nil)
}

// requestBoundToken is requestToken with a DPoP proof of key (unless nil),
// the request made once more with the server's nonce when it asks for one
// (RFC 9449 §8). The grant is bound to key if the server says it bound it
// (token type DPoP); a server that issued a bearer token has not.
func (c *Client) requestBoundToken(ctx context.Context, endpoint string, reg registration, form url.Values, key dpopKey) (*grant, error) {
	status, body, nonce, err := c.postToken(ctx, endpoint, reg, form, key)
	if e, _ := tokenError(body); err == nil && nonce && status == http.StatusBadRequest && e.Error == "use_dpop_nonce" {
		status, body, _, err = c.postToken(ctx, endpoint, reg, form, key) // once, with the nonce
	}
	if err != nil {
		return nil, err
	}
	if err := notGranted(status, body); err != nil {
		var refused *refusedError
		if errors.As(err, &refused) {
			c.forgetDeadClient(ctx, reg, refused.refusal.Error)
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
	bound := key != nil && strings.EqualFold(t.TokenType, "DPoP")
	if t.TokenType != "" && !strings.EqualFold(t.TokenType, "Bearer") && !bound {
		return nil, fmt.Errorf("token request: token type %q, not Bearer", t.TokenType)
	}
	now := time.Now()
	g := &grant{Access: t.AccessToken, Refresh: t.RefreshToken, Scopes: strings.Fields(t.Scope), Token: endpoint, Reg: reg, Issued: now}
	if bound {
		g.DPoP = key
	}
	if t.ExpiresIn > 0 {
		// Held to a year: a larger figure would overflow a Duration into
		// the past, and a token is refreshed within a year anyway.
		g.Expires = now.Add(time.Duration(min(t.ExpiresIn, maxLifetime.Seconds()) * float64(time.Second)))
	}
	return g, nil
}

// postToken makes one token request, with a new proof of key unless nil,
// and reads the answer, bounded; nonce reports whether it gave a new DPoP
// nonce.
func (c *Client) postToken(ctx context.Context, endpoint string, reg registration, form url.Values, key dpopKey) (status int, body []byte, nonce bool, err error) {
	req, err := c.tokenRequest(ctx, endpoint, reg, form)
	if err != nil {
		return 0, nil, false, err
	}
	if key != nil {
		proof, err := dpopProof(key, http.MethodPost, req.URL, "", c.nonces.get(req.URL))
		if err != nil {
			return 0, nil, false, err
		}
		req.Header.Set("DPoP", proof)
	}
	resp, err := c.o.HTTP.Do(req)
	if err != nil {
		return 0, nil, false, fmt.Errorf("token request: %w", err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes))
	return resp.StatusCode, body, key != nil && c.nonces.learn(req.URL, resp.Header), nil
}

// notGranted is the failure a token endpoint's answer of status with body
// says, nil for 200: a refusal (a 400 or 401 whose body is an OAuth error)
// apart from any other failure, which says nothing of the grant.
func notGranted(status int, body []byte) error {
	if status == http.StatusOK {
		return nil
	}
	e, ok := tokenError(body)
	err := fmt.Errorf("token request: HTTP %d: %s", status, e)
	if ok && (status == http.StatusBadRequest || status == http.StatusUnauthorized) {
		return &refusedError{refusal: e, err: err}
	}
	return err
}

// refusedError is a token endpoint's refusal (RFC 6749 §5.2), as opposed
// to a failure to reach it.
type refusedError struct {
	refusal refusal
	err     error
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// dead reports whether the refusal says the grant can never be refreshed:
// the grant or refresh token is invalid, expired or revoked, or the client
// is unknown or may not refresh. Any other (a malformed request, a scope)
// is the request's fault, not the grant's, and keeps it.
func (e *refusedError) dead() bool {
	switch e.refusal.Error {
	case "invalid_grant", "invalid_client", "unauthorized_client", "unsupported_grant_type":
		return true
	}
	return false
}

// refusal is a token endpoint's error answer, as RFC 6749 §5.2 has it.
type refusal struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// tokenError reads an error answer for what it may say: its error and
// description, bounded and with anything shaped like a token taken out,
// never the rest of the body, which may echo a token. ok is false for an
// answer that is no RFC 6749 error (not JSON, or naming none).
func tokenError(body []byte) (e refusal, ok bool) {
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		return refusal{Error: fmt.Sprintf("(an answer of %d bytes, not an OAuth error)", len(body))}, false
	}
	e.Error, e.Description = clip.Text(scrub(e.Error), 64), clip.Text(scrub(e.Description), 200)
	return e, true
}

// minTokenRun is the length from which a run of token characters in a
// server's error text is taken for a token.
const minTokenRun = 16

// scrub is s with every run of at least minTokenRun characters that a
// token is made of (base64url, base64, hex, a JWT's dots) replaced by
// "[…]", unless it is only lower-case letters and underscores (a word, an
// error code): a server that echoes a token in its description does not
// get it logged.
func scrub(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && tokenChar(s[j]) {
			j++
		}
		switch {
		case j == i:
			b.WriteByte(s[i])
			j++
		case j-i >= minTokenRun && !wordish(s[i:j]):
			b.WriteString("[…]")
		default:
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

func tokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/=", c) >= 0
}

func wordish(s string) bool {
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyz_") == ""
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
		if reg.ClientID != "" { // a workload may have none
			form.Set("client_id", reg.ClientID)
		}
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
	reg := c.ownRegistration(d.server.Issuer, "client_secret_basic")
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
