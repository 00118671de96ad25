package auth

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
)

// Credential is the token a caller presented, for the one use that needs
// it: an upstream whose OAuth client exchanges it for a token of its own
// (RFC 8693, ID-JAG). It lives in its request's context only, never in a
// Principal (which outlives the request), and prints as "[redacted]"
// whichever way it is formatted, logged or marshalled.
type Credential struct{ token string }

const redacted = "[redacted]"

func (Credential) String() string               { return redacted }
func (Credential) GoString() string             { return redacted }
func (Credential) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (Credential) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// Reveal is the token itself, for the request that exchanges it.
func (c Credential) Reveal() string { return c.token }

type credentialKey struct{}

// WithCredential returns ctx carrying the caller's credential.
func WithCredential(ctx context.Context, c Credential) context.Context {
	return context.WithValue(ctx, credentialKey{}, c)
}

// CredentialFrom is the credential ctx's caller presented; ok is false
// for none (a caller named by its certificate, work done for nobody).
func CredentialFrom(ctx context.Context) (c Credential, ok bool) {
	c, ok = ctx.Value(credentialKey{}).(Credential)
	return c, ok && c.token != ""
}

// Presented is the bearer token r's caller was admitted by: none when a
// names callers by their certificate (a token beside it was never checked).
func (a *Authenticator) Presented(r *http.Request) (Credential, bool) {
	if a.fromCert {
		return Credential{}, false
	}
	tok, ok := bearerToken(r)
	return Credential{token: tok}, ok
}

// bearerToken is r's `Authorization: Bearer` token.
func bearerToken(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}
