package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/clip"
)

// pending is an authorization waiting for its callback: everything the
// code exchange needs, found by the state alone (the callback carries no
// caller credential), bound to the principal it was made for.
type pending struct {
	Upstream  string       `json:"u"`
	Digest    string       `json:"d"` // the client configuration it was made under
	Principal string       `json:"p"` // whose tokens the exchange stores
	Verifier  string       `json:"v"`
	Issuer    string       `json:"iss"`
	IssParam  bool         `json:"ip"` // the server says it sends iss (RFC 9207)
	Scopes    []string     `json:"s,omitempty"`
	Resource  string       `json:"r"` // the RFC 8707 resource asked for
	Token     string       `json:"t"` // the token endpoint
	Reg       registration `json:"g"`
	For       string       `json:"f"` // the principal, as its user knows it (nameOf)
	Link      string       `json:"l"` // the authorization request, where the consent page leads
	// DPoP is the key to bind the tokens to, when the server requires it.
	DPoP dpopKey `json:"k,omitempty"`
}

// consent makes the authorization request of principal for scopes with the
// server discovery found, keeps it pending, and returns the URL its user
// must open.
func (c *Client) consent(ctx context.Context, principal string, d *discovery, scopes []string) (*ConsentRequired, error) {
	reg, err := c.register(ctx, d.server)
	if err != nil {
		return nil, err
	}
	if d.server.AuthorizationEndpoint == "" {
		return nil, fmt.Errorf("authorization server %s names no authorization endpoint", d.server.Issuer)
	}
	if slices.Contains(d.server.ScopesSupported, "offline_access") && len(scopes) > 0 && !slices.Contains(scopes, "offline_access") {
		// A refresh token, so the user is not asked again when the
		// access token expires.
		scopes = append(slices.Clip(scopes), "offline_access")
	}
	asks := d.server.Issuer + "\x00" + strings.Join(scopes, " ")
	if url, ok := c.shown(principal, asks); ok {
		return &ConsentRequired{Upstream: c.o.Upstream, URL: url}, nil
	}
	key, err := c.dpopKeyFor(d)
	if err != nil {
		return nil, err
	}
	state, verifier := randomToken(), randomToken()
	p := pending{Upstream: c.o.Upstream, Digest: c.digest, Principal: principal, Verifier: verifier, Issuer: d.server.Issuer,
		IssParam: d.server.IssParameterSupported, Scopes: scopes, Resource: d.resource, Token: d.server.TokenEndpoint, Reg: reg,
		For: nameOf(auth.From(ctx)), DPoP: key}
	q := url.Values{}
	q.Set("response_type", "code")
	q.Set("client_id", reg.ClientID)
	q.Set("redirect_uri", c.o.RedirectURI)
	q.Set("state", state)
	q.Set("code_challenge", challengeOf(verifier))
	q.Set("code_challenge_method", "S256")
	q.Set("resource", d.resource)
	if len(scopes) > 0 {
		q.Set("scope", strings.Join(scopes, " "))
	}
	sep := "?"
	if strings.Contains(d.server.AuthorizationEndpoint, "?") {
		sep = "&"
	}
	p.Link = d.server.AuthorizationEndpoint + sep + q.Encode()
	if _, err := c.save(ctx, pendingKey(state), "", p, 1, pendingTTL); err != nil { // a key of its own: one version
		return nil, fmt.Errorf("keeping the pending authorization: %w", err)
	}
	// The link opens Manifold's page, which says whom it is for, not the
	// authorization server: a user who opens another's link is told.
	u := c.o.ConnectURI + "?" + url.Values{"state": {state}}.Encode()
	c.show(principal, askedConsent{scopes: asks, url: u, until: time.Now().Add(pendingTTL / 2)})
	return &ConsentRequired{Upstream: c.o.Upstream, URL: u}, nil
}

// Connection is what the consent page shows of a pending authorization,
// and where it leads.
type Connection struct {
	Upstream string
	For      string // the principal it is for, as its user knows it
	Server   string // the authorization server's host
	URL      string // the authorization request
}

// Connection returns the pending authorization state names, without
// spending it: ErrUnknownState when there is none, or it was made under a
// configuration a reload replaced.
func (c *Client) Connection(ctx context.Context, state string) (*Connection, error) {
	var p pending
	if err := c.load(ctx, pendingKey(state), "", &p); err != nil || p.Upstream != c.o.Upstream || p.Digest != c.digest || p.Link == "" {
		return nil, ErrUnknownState
	}
	server := p.Issuer
	if u, err := url.Parse(p.Issuer); err == nil && u.Host != "" {
		server = u.Host
	}
	return &Connection{Upstream: p.Upstream, For: p.For, Server: server, URL: p.Link}, nil
}

// nameClaims are the claims that name a principal to its user, in order.
var nameClaims = []string{"email", "preferred_username", "name", "cn", "sub"}

// maxNameBytes bounds a principal's name on the consent page.
const maxNameBytes = 120

// nameOf is how p's user knows it: the first of its nameClaims it has, else
// its ID (a static token's names a digest of it, never the token), in
// printable characters only (no control or direction override to disguise
// it), bounded.
func nameOf(p *auth.Principal) string {
	if p == nil {
		return ""
	}
	name := p.ID
	for _, claim := range nameClaims {
		if v := p.Claims[claim]; len(v) > 0 && v[0] != "" {
			name = v[0]
			break
		}
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsGraphic(r) {
			return r
		}
		return -1
	}, clip.Text(name, 4*maxNameBytes))
	return clip.Text(name, maxNameBytes)
}

// shown returns the consent principal was last shown for asks, while its
// pending authorization has at least half its time left.
func (c *Client) shown(principal, asks string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.asked[principal]
	return a.url, ok && a.scopes == asks && time.Now().Before(a.until)
}

// show records the consent principal is shown; a zero a forgets it (its
// authorization was spent).
func (c *Client) show(principal string, a askedConsent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.asked) >= maxGrantsInMemory {
		c.asked = map[string]askedConsent{}
	}
	if a.url == "" {
		delete(c.asked, principal)
		return
	}
	c.asked[principal] = a
}

func pendingKey(state string) string {
	sum := sha256.Sum256([]byte(state))
	return "pend:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// randomToken is 256 random bits, URL-safe: a state or a PKCE verifier.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// challengeOf is the PKCE S256 challenge of verifier (RFC 7636 §4.2).
func challengeOf(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Errors of a callback; none of them says anything of the principal.
var (
	ErrUnknownState = errors.New("unknown, expired or used authorization")
	ErrIssuer       = errors.New("the authorization response's issuer is not the one asked")
	ErrDenied       = errors.New("the authorization server did not grant access")
)

// PendingUpstream returns the upstream a callback's state is for, without
// spending it, so the process can hand the callback to that upstream's
// client; ok is false for a state nobody issued.
func PendingUpstream(ctx context.Context, store Store, secret []byte, state string) (upstream string, ok bool) {
	rec, err := store.Get(ctx, pendingKey(state))
	if err != nil {
		return "", false
	}
	v, err := newSealer(secret).Open("", pendingKey(state), rec.Value)
	if err != nil {
		return "", false
	}
	var p pending
	if err := json.Unmarshal(v, &p); err != nil {
		return "", false
	}
	return p.Upstream, true
}

// Callback completes the authorization the state names with the
// authorization server's answer q (the callback's query): the state is
// spent whatever happens; the issuer is checked (RFC 9207), the code
// exchanged, and the tokens stored for the principal it was made for.
func (c *Client) Callback(ctx context.Context, q url.Values) error {
	var p pending
	if err := c.take(ctx, pendingKey(q.Get("state")), "", &p); err != nil {
		return ErrUnknownState
	}
	if p.Upstream != c.o.Upstream || p.Digest != c.digest {
		return ErrUnknownState // made for a configuration a reload replaced
	}
	c.show(p.Principal, askedConsent{}) // spent: the next consent is a new one
	if err := checkIssuer(p, q); err != nil {
		return err
	}
	if e := q.Get("error"); e != "" {
		return fmt.Errorf("%w: %s", ErrDenied, clip.Text(e, 64)) // as the browser brought it: bounded for the log
	}
	code := q.Get("code")
	if code == "" {
		return fmt.Errorf("%w: no code", ErrDenied)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.o.RedirectURI},
		"code_verifier": {p.Verifier}, "resource": {p.Resource}}
	g, err := c.requestBoundToken(ctx, p.Token, p.Reg, form, p.DPoP)
	if err != nil {
		return err
	}
	g.Resource = p.Resource
	if len(g.Scopes) == 0 {
		g.Scopes = p.Scopes
	}
	var prev int64
	if old := c.held.get(p.Principal); old != nil {
		prev = old.Version
	}
	g.Version = nextVersion(prev)
	c.keep(ctx, p.Principal, g)
	if c.o.Connected != nil {
		c.o.Connected(p.Principal)
	}
	return nil
}

// checkIssuer is RFC 9207: the iss of the response is the issuer asked,
// compared as a string; a server that says it sends iss must have.
func checkIssuer(p pending, q url.Values) error {
	iss, present := q["iss"]
	switch {
	case present && (len(iss) != 1 || iss[0] != p.Issuer):
		return ErrIssuer
	case !present && p.IssParam:
		return fmt.Errorf("%w: the server advertises iss and sent none", ErrIssuer)
	}
	return nil
}
