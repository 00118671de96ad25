package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Transport is the RoundTripper of the upstream's requests: each goes with
// the token of the principal it is made for (the caller's, from its
// context), and a refusal (401) is answered by the flow the MCP
// authorization specification gives, ending in a *ConsentRequired for the
// caller when its user must consent.
func (c *Client) Transport(base http.RoundTripper) http.RoundTripper {
	return roundTripper{c: c, base: base}
}

type roundTripper struct {
	c    *Client
	base http.RoundTripper
}

// RoundTrip tells apart what failed at the server (an error of the base
// transport, as it came) from what failed before anything was sent, an
// *UnsentError.
func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.authorized(req)
	var sent *sendError
	switch {
	case err == nil:
		return resp, nil
	case errors.As(err, &sent):
		return nil, sent.err
	}
	return nil, &UnsentError{Upstream: t.c.o.Upstream, Err: err}
}

// UnsentError is a request that was not sent: its caller's authorization
// could not be had (its user must consent: a *ConsentRequired; or the
// token store or the authorization server failed). It says nothing of the
// upstream server's health.
type UnsentError struct {
	Upstream string
	Err      error
}

func (e *UnsentError) Error() string { return e.Err.Error() }
func (e *UnsentError) Unwrap() error { return e.Err }

// Unsent reports whether err is an *UnsentError.
func Unsent(err error) bool {
	var u *UnsentError
	return err != nil && errors.As(err, &u)
}

// sendError is the base transport's failure, told apart from the rest
// inside RoundTrip.
type sendError struct{ err error }

func (e *sendError) Error() string { return e.err.Error() }

func (t roundTripper) authorized(req *http.Request) (*http.Response, error) {
	c := t.c
	ctx := req.Context()
	if c.PerPrincipal() && probing(ctx) {
		return t.send(req, nil) // no principal's: its challenge says the server is up
	}
	principal, err := c.principalOf(ctx)
	if err != nil {
		return nil, err
	}
	g, err := c.current(ctx, principal)
	if err != nil {
		return nil, err
	}
	resp, err := t.send(req, g)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && g != nil && c.o.Mode != ModeUser:
		// Refused: a new grant, once.
		drain(resp)
		c.drop(ctx, principal, g)
		if g, err = c.renew(ctx, principal, nil); err != nil {
			return nil, err
		}
		return t.send(req, g)
	case resp.StatusCode == http.StatusUnauthorized && g != nil && g.Refresh != "":
		// Refused although not expired: refresh, and try once more.
		drain(resp)
		if g, err = c.renew(ctx, principal, g); err != nil {
			return nil, err // the authorization server failed: that is no reason to ask the user
		}
		if g != nil {
			if resp, err = t.send(req, g); err != nil || resp.StatusCode != http.StatusUnauthorized {
				return resp, err
			}
			drain(resp)
		}
		return nil, c.askConsent(ctx, principal, parseChallenge(resp.Header), nil)
	case resp.StatusCode == http.StatusUnauthorized && c.o.Mode == ModeUser:
		drain(resp)
		if g != nil {
			c.drop(ctx, principal, g)
		}
		return nil, c.askConsent(ctx, principal, parseChallenge(resp.Header), nil)
	case resp.StatusCode == http.StatusForbidden && c.o.Mode == ModeUser && g != nil:
		return c.forbidden(ctx, principal, g, resp)
	case resp.StatusCode/100 == 2:
		c.accepted(principal)
	}
	return resp, nil
}

// forbidden is a user's 403 made a consent for the scope it asks for
// (step-up), when it asks for more scope, and passed on otherwise.
func (c *Client) forbidden(ctx context.Context, principal string, g *grant, resp *http.Response) (*http.Response, error) {
	ch := parseChallenge(resp.Header)
	if ch.Error != "insufficient_scope" {
		return resp, nil
	}
	drain(resp)
	if !c.stepUp(principal) {
		return nil, fmt.Errorf("upstream %s: %w", c.o.Upstream, ErrScopeRetries)
	}
	return nil, c.askConsent(ctx, principal, ch, g.Scopes)
}

// send sends req with g's token (or none). A DPoP-bound token goes with a
// new proof each time, and once more with the server's nonce when it asks
// for one (RFC 9449 §9).
func (t roundTripper) send(req *http.Request, g *grant) (*http.Response, error) {
	resp, err := t.sendOnce(req, g)
	if err != nil || g == nil || g.DPoP == nil || !t.c.nonces.learn(req.URL, resp.Header) {
		return resp, err
	}
	if ch := parseChallenge(resp.Header); resp.StatusCode != http.StatusUnauthorized || !ch.DPoP || ch.Error != "use_dpop_nonce" {
		return resp, nil
	}
	drain(resp)
	return t.sendOnce(req, g)
}

func (t roundTripper) sendOnce(req *http.Request, g *grant) (*http.Response, error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	r.Header.Del("Authorization") // never a caller's credential: the spec forbids passing it through
	r.Header.Del("DPoP")
	switch {
	case g != nil && g.DPoP != nil:
		proof, err := dpopProof(g.DPoP, r.Method, r.URL, g.Access, t.c.nonces.get(r.URL))
		if err != nil {
			return nil, err
		}
		r.Header.Set("Authorization", "DPoP "+g.Access)
		r.Header.Set("DPoP", proof)
	case g != nil:
		r.Header.Set("Authorization", "Bearer "+g.Access)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, &sendError{err}
	}
	return resp, nil
}

// askConsent discovers where the principal's user must consent (for the
// scopes the challenge names, with those held), and returns the
// *ConsentRequired that asks it.
func (c *Client) askConsent(ctx context.Context, principal string, ch challenge, held []string) error {
	if c.o.Mode != ModeUser {
		return fmt.Errorf("upstream %s refused Manifold's own token", c.o.Upstream)
	}
	d, err := c.discover(ctx, ch)
	if err != nil {
		return fmt.Errorf("upstream %s: authorization discovery: %w", c.o.Upstream, err)
	}
	scopes := d.scopes
	if len(scopes) == 0 {
		scopes = c.o.Scopes
	}
	if held != nil {
		scopes = union(held, scopes)
	}
	cr, err := c.consent(ctx, principal, d, scopes)
	if err != nil {
		return fmt.Errorf("upstream %s: %w", c.o.Upstream, err)
	}
	return cr
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// IsConsent reports whether err asks for a user's consent.
func IsConsent(err error) (*ConsentRequired, bool) {
	if err == nil {
		return nil, false // the common case, without errors.As's allocation
	}
	var cr *ConsentRequired
	ok := errors.As(err, &cr)
	return cr, ok
}
