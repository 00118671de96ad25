package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// maxTokenBytes bounds a token before any parsing.
const maxTokenBytes = 16 << 10

// acceptedAlgorithms are the asymmetric algorithms a token may be signed
// with. `none` and the HMAC family are refused by name before any key is
// looked up: an HMAC "signed" with a public key is the classic confusion.
var acceptedAlgorithms = map[string]jwa.SignatureAlgorithm{
	jwa.RS256().String(): jwa.RS256(),
	jwa.ES256().String(): jwa.ES256(),
	jwa.EdDSA().String(): jwa.EdDSA(),
}

// verifier checks JWTs against one issuer's keys.
type verifier struct {
	o    JWTOptions
	keys *keySource
}

func newVerifier(o JWTOptions, log *slog.Logger) (*verifier, error) {
	if o.Issuer == "" || len(o.Audiences) == 0 || (o.JWKSURL == "") == (o.JWKSFile == "") {
		return nil, errors.New("jwt needs issuer, audiences, and one of jwks_url and jwks_file")
	}
	v := &verifier{o: o, keys: newKeySource(o, log)}
	if o.JWKSFile != "" {
		// A file that cannot be read is a configuration error, found now.
		if _, err := v.keys.reload(context.Background()); err != nil {
			return nil, fmt.Errorf("jwt.jwks_file: %w", err)
		}
	}
	return v, nil
}

// verify checks tok's algorithm, signature, issuer, audience and times,
// and returns its principal.
func (v *verifier) verify(ctx context.Context, tok string) (*Principal, error) {
	if len(tok) > maxTokenBytes {
		return nil, fmt.Errorf("token longer than %d bytes", maxTokenBytes)
	}
	msg, err := jws.Parse([]byte(tok), jws.WithCompact())
	if err != nil {
		return nil, errors.New("not a signed JWT")
	}
	if len(msg.Signatures()) != 1 {
		return nil, errors.New("not a signed JWT")
	}
	h := msg.Signatures()[0].ProtectedHeaders()
	name, _ := h.Algorithm()
	alg, ok := acceptedAlgorithms[name.String()]
	if !ok {
		return nil, fmt.Errorf("algorithm %q is not accepted", name.String())
	}
	kid, _ := h.KeyID()
	key, err := v.keys.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	t, err := jwt.Parse([]byte(tok), jwt.WithKey(alg, key),
		jwt.WithIssuer(v.o.Issuer), jwt.WithAcceptableSkew(v.o.Leeway),
		jwt.WithRequiredClaim("exp"), jwt.WithRequiredClaim("sub"))
	if err != nil {
		return nil, err
	}
	aud, _ := t.Audience()
	if !slices.ContainsFunc(aud, func(a string) bool { return slices.Contains(v.o.Audiences, a) }) {
		return nil, errors.New("audience not accepted")
	}
	return v.principal(t)
}

// principal names the caller by issuer, subject and the principal claims,
// encoded as a JSON array so that no two different callers share a name.
func (v *verifier) principal(t jwt.Token) (*Principal, error) {
	claims := claimsOf(t)
	iss, _ := t.Issuer()
	sub, _ := t.Subject()
	parts := []any{iss, sub}
	for _, c := range v.o.PrincipalClaims {
		parts = append(parts, c, claims[c])
	}
	id, err := json.Marshal(parts)
	if err != nil {
		return nil, err
	}
	exp, _ := t.Expiration() // required above
	// Good as long as Parse would take it: its expiry and the leeway.
	return &Principal{ID: string(id), Claims: claims, Keyed: true, Expires: exp.Add(v.o.Leeway)}, nil
}

// claimsOf returns every claim as strings: a string as it is, an array of
// strings member by member, anything else as JSON.
func claimsOf(t jwt.Token) map[string][]string {
	claims := map[string][]string{}
	for _, name := range t.Keys() {
		var v any
		if t.Get(name, &v) != nil {
			continue
		}
		claims[name] = claimStrings(v)
	}
	return claims
}

func claimStrings(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []string:
		return x
	case []any:
		var out []string
		for _, m := range x {
			out = append(out, claimStrings(m)...)
		}
		return out
	case time.Time:
		return []string{fmt.Sprint(x.Unix())}
	}
	b, _ := json.Marshal(v)
	return []string{string(b)}
}
