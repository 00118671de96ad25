// Package auth decides who a caller is, before anything else sees the
// request.
//
// A caller presents `Authorization: Bearer <token>`. The token is either one
// of the configured static tokens (kept as SHA-256 digests, so the
// configuration holds no secret), or a JWT signed by the configured issuer,
// checked against the issuer's JWKS. The answer is a Principal: a stable
// identity that outlives the token. With JWT it is the issuer plus the
// subject (plus the claims the configuration names, a tenant say), so a
// refreshed token is the same principal and keeps its private cache. A
// static token is its own principal, named by a digest prefix.
//
// The issuer's keys are held, and fetched again on rotation and age; a
// request waits for a fetch a bounded time, and a token that could not be
// checked for want of keys is ErrKeysUnavailable, not ErrInvalidToken: an
// outage of the identity provider is not the caller's fault.
//
// The package knows HTTP only as far as reading the header and describing
// the protected resource (RFC 9728); answering 401 is the frontend's.
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// Principal is an authenticated caller.
type Principal struct {
	// ID names the principal; it never contains a token. For a JWT it is
	// the issuer, the subject and the principal claims; for a static
	// token, "token:" and a prefix of its digest.
	ID string
	// Claims are the token's claims as strings (an array claim keeps every
	// member; numbers and booleans as JSON writes them), for access rules.
	Claims map[string][]string
	// Keyed says the principal, rather than the credential, may key the
	// caller's private cache entries: it names the same caller across token
	// refreshes. False for static tokens, whose credential is the identity.
	Keyed bool
	// Expires is when the credential stops being good (a JWT's exp, a
	// certificate's end); zero for one that does not expire (a static
	// token). What lasts beyond one request, a listen stream, ends then.
	Expires time.Time
}

// Errors Authenticate returns. ErrNoToken: nothing to check; a challenge
// without an error code is the answer. ErrInvalidToken wraps the reason a
// presented token was refused. ErrKeysUnavailable: the issuer's keys could
// not be had to check the token (its key set is unreachable or slow); the
// token may be good, and the caller should come back after RetryAfter.
var (
	ErrNoToken         = errors.New("no bearer token")
	ErrInvalidToken    = errors.New("invalid token")
	ErrKeysUnavailable = errors.New("the issuer's keys are unavailable")
)

// RetryAfter is when a caller refused with ErrKeysUnavailable should try
// again: a few refetch intervals, time for the load under way (and its
// retries) to end.
const RetryAfter = 5 * time.Second

// Options configure an Authenticator.
type Options struct {
	// BearerTokens are accepted static tokens, each written as the token
	// or as "sha256:<hex digest>".
	BearerTokens []string
	// JWT, when set, accepts tokens its issuer signed.
	JWT *JWTOptions
	// FromClientCert names the caller by its verified TLS client
	// certificate (mutual TLS): no token is needed.
	FromClientCert bool
	// Logger reports key fetches and their failures (never a token).
	Logger *slog.Logger
}

// JWTOptions configure JWT validation.
type JWTOptions struct {
	Issuer    string
	Audiences []string
	// JWKSURL is fetched, kept, and fetched again when a token names an
	// unknown key; JWKSFile is read instead (and read again likewise).
	JWKSURL, JWKSFile string
	// PrincipalClaims are claims that, with iss and sub, name a principal.
	PrincipalClaims []string
	// Leeway tolerates clock skew on exp and nbf.
	Leeway time.Duration
	// Client fetches the JWKS; it should retry a few times, boundedly.
	Client *http.Client
}

// Authenticator checks callers' tokens. It is safe for concurrent use.
type Authenticator struct {
	static   staticTokens
	jwt      *verifier
	fromCert bool
}

// New builds an Authenticator; with no tokens and no JWT it admits
// everyone (Enabled reports false).
func New(o Options) (*Authenticator, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := newStaticTokens(o.BearerTokens)
	if err != nil {
		return nil, err
	}
	a := &Authenticator{static: st, fromCert: o.FromClientCert}
	if o.JWT != nil {
		if a.jwt, err = newVerifier(*o.JWT, o.Logger); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Enabled reports whether callers must authenticate.
func (a *Authenticator) Enabled() bool {
	return a != nil && (len(a.static) > 0 || a.jwt != nil || a.fromCert)
}

// Authenticate returns the caller of r. Only one Authorization header is
// read: the chain refuses requests with several before this runs.
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (*Principal, error) {
	if a.fromCert {
		return fromCertificate(r)
	}
	tok, ok := bearerToken(r)
	if !ok {
		return nil, ErrNoToken
	}
	if p, ok := a.static.match(tok); ok {
		return p, nil
	}
	if a.jwt == nil {
		return nil, ErrInvalidToken
	}
	p, err := a.jwt.verify(ctx, tok)
	if errors.Is(err, ErrKeysUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, errors.Join(ErrInvalidToken, err)
	}
	return p, nil
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// ClaimsFrom returns the claims of the principal ctx carries: nil for a
// caller who is not authenticated, whom no access rule admits.
func ClaimsFrom(ctx context.Context) map[string][]string {
	if p := From(ctx); p != nil {
		return p.Claims
	}
	return nil
}

// From returns the principal ctx carries, or nil.
func From(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// fromCertificate names the caller by the verified client certificate's
// issuer and subject: with several CAs trusted, one CA cannot issue a
// certificate that is another's user. Its common name, organizations and
// units, and DNS names are its claims (cn, o, ou, dns), for access rules. A
// renewed certificate from the same CA with the same subject is the same
// principal.
func fromCertificate(r *http.Request) (*Principal, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil, ErrNoToken
	}
	leaf := r.TLS.VerifiedChains[0][0]
	claims := map[string][]string{
		"cn": {leaf.Subject.CommonName}, "o": leaf.Subject.Organization,
		"ou": leaf.Subject.OrganizationalUnit, "dns": leaf.DNSNames,
	}
	id, err := json.Marshal([]string{"cert", leaf.Issuer.String(), leaf.Subject.String()})
	if err != nil {
		return nil, err
	}
	return &Principal{ID: string(id), Claims: claims, Keyed: true, Expires: leaf.NotAfter}, nil
}
