package test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// issuer is an identity provider run by the test: real RSA, EC P-256 and
// Ed25519 keys, a JWKS served over HTTP (with a count of fetches), and
// tokens minted on demand. Keys can be added (a rotation) while it runs.
type issuer struct {
	t       testing.TB
	URL     string // the iss claim
	JWKS    string // the key set's URL
	fetches atomic.Int32

	mu        sync.Mutex
	published []jwk.Key // public keys served
	keys      map[string]signingKey
	resources []string // the resource parameters of token requests
}

type signingKey struct {
	alg jwa.SignatureAlgorithm
	key jwk.Key // private, with its kid
}

const testAudience = "https://manifold.test/mcp"

func newIssuer(t testing.TB) *issuer {
	is := &issuer{t: t, keys: map[string]signingKey{}}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	mux.HandleFunc("GET /jwks.json", func(w http.ResponseWriter, _ *http.Request) {
		is.fetches.Add(1)
		is.mu.Lock()
		set := jwk.NewSet()
		for _, k := range is.published {
			_ = set.AddKey(k)
		}
		is.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	})
	t.Cleanup(srv.Close)
	is.URL, is.JWKS = srv.URL, srv.URL+"/jwks.json"
	is.serveAuthorization(mux)
	is.addKey("rsa-1", jwa.RS256(), mustRSA(t))
	is.addKey("ec-1", jwa.ES256(), mustEC(t))
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is.addKey("ed-1", jwa.EdDSA(), ed)
	return is
}

func mustRSA(t testing.TB) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustEC(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// addKey makes kid a signing key, and publishes it in the JWKS.
func (is *issuer) addKey(kid string, alg jwa.SignatureAlgorithm, raw crypto.Signer) {
	is.t.Helper()
	priv, err := jwk.Import(raw)
	if err != nil {
		is.t.Fatal(err)
	}
	_ = priv.Set(jwk.KeyIDKey, kid)
	pub, err := jwk.PublicKeyOf(priv)
	if err != nil {
		is.t.Fatal(err)
	}
	_ = pub.Set(jwk.AlgorithmKey, alg)
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys[kid] = signingKey{alg: alg, key: priv}
	is.published = append(is.published, pub)
}

// addUnpublished makes kid a signing key the JWKS does not list yet.
func (is *issuer) addUnpublished(kid string, alg jwa.SignatureAlgorithm, raw crypto.Signer) (publish func()) {
	is.addKey(kid, alg, raw)
	is.mu.Lock()
	defer is.mu.Unlock()
	k := is.published[len(is.published)-1]
	is.published = is.published[:len(is.published)-1]
	return func() {
		is.mu.Lock()
		defer is.mu.Unlock()
		is.published = append(is.published, k)
	}
}

// claims are a token's claims; mint fills iss, aud and exp unless set.
type claims map[string]any

// mint signs c with the key kid.
func (is *issuer) mint(kid string, c claims) string {
	is.t.Helper()
	is.mu.Lock()
	sk, ok := is.keys[kid]
	is.mu.Unlock()
	if !ok {
		is.t.Fatalf("no key %q", kid)
	}
	b := jwt.NewBuilder()
	full := claims{"iss": is.URL, "aud": []string{testAudience}, "exp": time.Now().Add(time.Hour), "iat": time.Now()}
	for k, v := range c {
		full[k] = v
	}
	for k, v := range full {
		if v != nil {
			b = b.Claim(k, v)
		}
	}
	tok, err := b.Build()
	if err != nil {
		is.t.Fatal(err)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(sk.alg, sk.key))
	if err != nil {
		is.t.Fatal(err)
	}
	return string(signed)
}

// forge builds a compact token by hand, for the algorithms no library
// will sign with: "none" (no signature) and HS256 keyed with the RSA
// public key's bytes (the algorithm-confusion attack).
func (is *issuer) forge(alg string, c claims) string {
	is.t.Helper()
	full := claims{"iss": is.URL, "aud": testAudience, "sub": "mallory", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range c {
		full[k] = v
	}
	enc := base64.RawURLEncoding
	hdr, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT", "kid": "rsa-1"})
	body, _ := json.Marshal(full)
	input := enc.EncodeToString(hdr) + "." + enc.EncodeToString(body)
	switch alg {
	case "none":
		return input + "."
	case "HS256":
		is.mu.Lock()
		var raw rsa.PrivateKey
		_ = jwk.Export(is.keys["rsa-1"].key, &raw)
		is.mu.Unlock()
		der, _ := x509.MarshalPKIXPublicKey(&raw.PublicKey)
		m := hmac.New(sha256.New, der)
		m.Write([]byte(input))
		return input + "." + enc.EncodeToString(m.Sum(nil))
	}
	is.t.Fatalf("forge: %s", alg)
	return ""
}

// authYAML is the auth section trusting is.
func (is *issuer) authYAML(extra string) string {
	return fmt.Sprintf("auth:\n  jwt: {issuer: %q, audiences: [%q], jwks_url: %q}\n  authorization_servers: [%q]\n  scopes_supported: [mcp]\n%s",
		is.URL, testAudience, is.JWKS, is.URL, extra)
}

func decodeSegment(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func encodeSegment(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// serveAuthorization makes the issuer an OAuth authorization server too:
// its metadata (RFC 8414) and a token endpoint for the client-credentials
// grant of one client, agent-7, which mints an RS256 token whose audience
// is the resource asked for (RFC 8707), as well as testAudience.
func (is *issuer) serveAuthorization(mux *http.ServeMux) {
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.URL, "authorization_endpoint": is.URL + "/authorize", "token_endpoint": is.URL + "/token", "jwks_uri": is.JWKS,
			"grant_types_supported": []string{"client_credentials"}, "response_types_supported": []string{"code"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic"},
		})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok || id != "agent-7" || secret != "agent-7-secret" || r.FormValue("grant_type") != "client_credentials" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		resource := r.FormValue("resource")
		is.mu.Lock()
		is.resources = append(is.resources, resource)
		is.mu.Unlock()
		tok := is.mint("rsa-1", claims{"sub": id, "aud": []string{resource, testAudience}, "scope": r.FormValue("scope")})
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
}
