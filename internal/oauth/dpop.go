package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// DPoP (RFC 9449) binds a token to a key of the client's: each request
// carries a proof signed with it, so a token stolen alone is of no use.
// It is used where the server requires it (a DPoP challenge, or resource
// metadata saying dpop_bound_access_tokens_required), never merely
// because an authorization server supports it. The key, one per grant, is
// made with the authorization request and kept in the pending
// authorization and then in the grant, sealed as they are: every replica
// that loads the grant proves with the same key, and a refresh uses it too
// (the server binds the refresh token to it).

// dpopKey is a private key as a JWK (JSON); nil when tokens are not bound.
type dpopKey = json.RawMessage

// newDPoPKey makes a P-256 key (ES256, the algorithm every DPoP server
// must accept).
func newDPoPKey() (dpopKey, error) {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	k, err := jwk.Import(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(k)
}

// dpopProof is a proof for a request of method to target, with the token
// it carries (ath; none to the token endpoint) and the server's nonce.
func dpopProof(key dpopKey, method string, target *url.URL, token, nonce string) (string, error) {
	priv, err := jwk.ParseKey(key)
	if err != nil {
		return "", fmt.Errorf("the grant's DPoP key: %w", err)
	}
	pub, err := priv.PublicKey()
	if err != nil {
		return "", fmt.Errorf("the grant's DPoP key: %w", err)
	}
	h := jws.NewHeaders()
	if err := h.Set(jws.TypeKey, "dpop+jwt"); err != nil {
		return "", err
	}
	if err := h.Set(jws.JWKKey, pub); err != nil {
		return "", err
	}
	htu := url.URL{Scheme: target.Scheme, Host: target.Host, Path: target.Path, RawPath: target.RawPath} // no query, fragment or user (§4.2)
	claims := map[string]any{"jti": randomToken(), "htm": method, "htu": htu.String(), "iat": time.Now().Unix()}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		claims["ath"] = base64.RawURLEncoding.EncodeToString(sum[:])
	}
	if nonce != "" {
		claims["nonce"] = nonce
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signed, err := jws.Sign(payload, jws.WithKey(jwa.ES256(), priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		return "", fmt.Errorf("signing a DPoP proof: %w", err)
	}
	return string(signed), nil
}

// dpopKeyFor is the key to bind the tokens of an authorization to: a new
// one when the server requires DPoP, else none.
func (c *Client) dpopKeyFor(d *discovery) (dpopKey, error) {
	if !d.dpop {
		return nil, nil
	}
	if !acceptsES256(d.server.DPoPAlgs) {
		return nil, fmt.Errorf("authorization server %s requires DPoP and does not take ES256 proofs", d.server.Issuer)
	}
	return newDPoPKey()
}

// acceptsES256 reports whether a server listing the DPoP algorithms algs
// accepts Manifold's proofs (a server listing none accepts ES256, §5.1).
func acceptsES256(algs []string) bool {
	return len(algs) == 0 || slices.Contains(algs, "ES256")
}

// nonces are the DPoP nonces servers gave (§8, §9), per origin: the token
// endpoint's and the resource's differ. Only this replica's: another
// replica is asked once for its own. The zero value is ready.
type nonces struct {
	mu sync.Mutex
	m  map[string]string
}

// maxNonces bounds the origins whose nonce is kept; maxNonceBytes a nonce.
const (
	maxNonces     = 1000
	maxNonceBytes = 256
)

func originOf(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

func (n *nonces) get(u *url.URL) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m[originOf(u)]
}

// learn keeps the nonce h gives for u's origin, if any (a server may give
// a new one on any answer); it reports whether it is new.
func (n *nonces) learn(u *url.URL, h http.Header) bool {
	nonce := h.Get("DPoP-Nonce")
	if !validNonce(nonce) {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m[originOf(u)] == nonce {
		return false
	}
	if n.m == nil || len(n.m) >= maxNonces {
		n.m = map[string]string{}
	}
	n.m[originOf(u)] = nonce
	return true
}

// validNonce is RFC 9449's nonce syntax (1*NQCHAR), bounded.
func validNonce(s string) bool {
	if s == "" || len(s) > maxNonceBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
