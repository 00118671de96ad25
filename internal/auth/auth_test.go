package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

func request(authorization string) *http.Request {
	r := httptest.NewRequest("POST", "/mcp", nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	return r
}

func mustNew(t *testing.T, o Options) *Authenticator {
	t.Helper()
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A static token is admitted whether configured as itself or as its
// digest, as one principal named without the token; anything near it, and
// the configured digest presented as a token, is refused.
func TestStaticTokens(t *testing.T) {
	const good = "s3cret-token-of-alice"
	sum := sha256.Sum256([]byte(good))
	digest := HashPrefix + hex.EncodeToString(sum[:])
	plain := mustNew(t, Options{BearerTokens: []string{"other", good}})
	hashed := mustNew(t, Options{BearerTokens: []string{digest}})
	p1, err1 := plain.Authenticate(context.Background(), request("Bearer "+good))
	p2, err2 := hashed.Authenticate(context.Background(), request("bearer  "+good))
	if err1 != nil || err2 != nil {
		t.Fatalf("the good token refused: %v, %v", err1, err2)
	}
	if p1.ID != p2.ID || !strings.HasPrefix(p1.ID, "token:") || strings.Contains(p1.ID, good) || p1.Keyed {
		t.Fatalf("principals %+v and %+v: want one ID, token:<digest prefix>, not keyed", p1, p2)
	}
	if other, _ := plain.Authenticate(context.Background(), request("Bearer other")); other == nil || other.ID == p1.ID {
		t.Fatalf("two tokens share a principal: %+v", other)
	}
	for _, h := range []string{"Bearer " + good[:len(good)-1], "Bearer " + good + "x", "Bearer " + digest, "Bearer " + strings.ToUpper(good)} {
		if p, err := hashed.Authenticate(context.Background(), request(h)); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%q: %+v, %v; want ErrInvalidToken", h, p, err)
		}
	}
	for _, h := range []string{"", "Basic " + good, "Bearer ", good} {
		if _, err := hashed.Authenticate(context.Background(), request(h)); !errors.Is(err, ErrNoToken) {
			t.Errorf("%q: %v, want ErrNoToken", h, err)
		}
	}
	if _, err := New(Options{BearerTokens: []string{"a", "sha256:abc"}}); err == nil || !strings.Contains(err.Error(), "bearer_tokens[1]") {
		t.Errorf("a short digest: %v, want an error naming bearer_tokens[1]", err)
	}
	if a := mustNew(t, Options{}); a.Enabled() {
		t.Error("with nothing configured, callers must still authenticate")
	}
}

// Presented gives the bearer token for the request that exchanges it, and
// nothing when callers are named by their certificate.
func TestPresented(t *testing.T) {
	a := mustNew(t, Options{BearerTokens: []string{"tok"}})
	if c, ok := a.Presented(request("Bearer tok")); !ok || c.Reveal() != "tok" {
		t.Errorf("Presented: %q %v", c.Reveal(), ok)
	}
	if _, ok := a.Presented(request("Basic tok")); ok {
		t.Error("a Basic credential was presented as a bearer token")
	}
	cert := mustNew(t, Options{FromClientCert: true})
	if c, ok := cert.Presented(request("Bearer tok")); ok {
		t.Errorf("with client certificates, a token beside one was presented: %q", c.Reveal())
	}
}

// issuer signs tokens with one ES256 key published in a JWKS file.
type issuer struct {
	t    *testing.T
	key  jwk.Key
	file string
}

const testIssuer, testAudience = "https://id.example", "manifold"

func newIssuer(t *testing.T) *issuer {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	_ = priv.Set(jwk.KeyIDKey, "k1")
	pub, err := jwk.PublicKeyOf(priv)
	if err != nil {
		t.Fatal(err)
	}
	set := jwk.NewSet()
	_ = set.AddKey(pub)
	b, _ := json.Marshal(set)
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return &issuer{t: t, key: priv, file: file}
}

// mint signs claims, with iss, aud and exp filled unless given.
func (is *issuer) mint(c map[string]any) string {
	is.t.Helper()
	full := map[string]any{"iss": testIssuer, "aud": []string{testAudience}, "exp": time.Now().Add(time.Hour)}
	for k, v := range c {
		full[k] = v
	}
	b := jwt.NewBuilder()
	for k, v := range full {
		b = b.Claim(k, v)
	}
	tok, err := b.Build()
	if err != nil {
		is.t.Fatal(err)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), is.key))
	if err != nil {
		is.t.Fatal(err)
	}
	return string(signed)
}

func (is *issuer) authenticator(leeway time.Duration) *Authenticator {
	return mustNew(is.t, Options{JWT: &JWTOptions{Issuer: testIssuer, Audiences: []string{testAudience},
		JWKSFile: is.file, PrincipalClaims: []string{"tenant"}, Leeway: leeway}})
}

// The principal of a JWT is its issuer, subject and principal claims: a
// refreshed token is the same principal, another tenant another, and no
// subject can be written to pass for another caller's name.
func TestJWTPrincipalKey(t *testing.T) {
	is := newIssuer(t)
	a := is.authenticator(0)
	id := func(c map[string]any) string {
		t.Helper()
		p, err := a.Authenticate(context.Background(), request("Bearer "+is.mint(c)))
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if !p.Keyed {
			t.Errorf("a JWT principal is not keyed: %+v", p)
		}
		return p.ID
	}
	alice := id(map[string]any{"sub": "alice", "tenant": "t1"})
	if again := id(map[string]any{"sub": "alice", "tenant": "t1", "iat": time.Now(), "scope": "more"}); again != alice {
		t.Errorf("a refreshed token is another principal: %s, then %s", alice, again)
	}
	for _, c := range []map[string]any{
		{"sub": "alice", "tenant": "t2"},
		{"sub": "alice"},
		{"sub": `alice","tenant","t1`},
		{"sub": "alice\",\"tenant\",[\"t1\"]"},
		{"sub": "alice/t1"}, {"sub": "alice|t1"}, {"sub": "alice:t1"}, {"sub": "alice\x00t1"}, {"sub": "alice t1"},
	} {
		if other := id(c); other == alice {
			t.Errorf("%v is named %s, as alice of t1 is", c, other)
		}
	}
}

// A JWT is good until its exp plus the leeway, and the principal says so;
// past it, and for another audience or issuer, the token is invalid.
func TestJWTTimesAndAudience(t *testing.T) {
	is := newIssuer(t)
	exp := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	lenient := is.authenticator(time.Minute)
	p, err := lenient.Authenticate(context.Background(), request("Bearer "+is.mint(map[string]any{"sub": "a", "exp": exp})))
	if err != nil {
		t.Fatalf("expired 30 s ago, leeway 1 min: %v", err)
	}
	if !p.Expires.Equal(exp.Add(time.Minute)) {
		t.Errorf("Expires %v, want exp plus the leeway %v", p.Expires, exp.Add(time.Minute))
	}
	strict := is.authenticator(0)
	for name, c := range map[string]map[string]any{
		"expired":        {"sub": "a", "exp": exp},
		"not yet":        {"sub": "a", "nbf": time.Now().Add(time.Hour)},
		"other audience": {"sub": "a", "aud": []string{"elsewhere"}},
		"other issuer":   {"sub": "a", "iss": "https://evil.example"},
		"no subject":     {},
	} {
		if _, err := strict.Authenticate(context.Background(), request("Bearer "+is.mint(c))); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: %v, want ErrInvalidToken", name, err)
		}
	}
}

// Tokens that are not signed with an accepted algorithm, or are too big
// to parse, are refused before any key is looked up.
func TestJWTRefusedBeforeTheKeys(t *testing.T) {
	is := newIssuer(t)
	a := is.authenticator(0)
	enc := base64.RawURLEncoding
	body := enc.EncodeToString([]byte(`{"iss":"` + testIssuer + `","aud":"manifold","sub":"mallory","exp":9999999999}`))
	none := enc.EncodeToString([]byte(`{"alg":"none","kid":"k1"}`)) + "." + body + "."
	hs := enc.EncodeToString([]byte(`{"alg":"HS256","kid":"k1"}`)) + "." + body + "." + enc.EncodeToString([]byte("sig"))
	huge := is.mint(map[string]any{"sub": "a", "pad": strings.Repeat("x", maxTokenBytes)})
	for name, tok := range map[string]string{"none": none, "HS256": hs, "huge": huge, "garbage": "a.b.c"} {
		if _, err := a.Authenticate(context.Background(), request("Bearer "+tok)); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: %v, want ErrInvalidToken", name, err)
		}
	}
}

// An issuer whose keys cannot be fetched makes a token unchecked, not
// invalid: the caller is told to come back, not that its token is bad.
func TestJWTKeysUnavailable(t *testing.T) {
	is := newIssuer(t)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusBadGateway)
	}))
	defer down.Close()
	a := mustNew(t, Options{JWT: &JWTOptions{Issuer: testIssuer, Audiences: []string{testAudience}, JWKSURL: down.URL}})
	_, err := a.Authenticate(context.Background(), request("Bearer "+is.mint(map[string]any{"sub": "a"})))
	if !errors.Is(err, ErrKeysUnavailable) || errors.Is(err, ErrInvalidToken) {
		t.Fatalf("keys unreachable: %v, want ErrKeysUnavailable alone", err)
	}
}

// certificate issues a client certificate for subject cn, signed by a CA
// named ca; it returns the verified chain as a TLS handshake leaves it.
func certificate(t *testing.T, ca, cn string) [][]*x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	issuer := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: ca}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: []string{"acme"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour).Truncate(time.Second), DNSNames: []string{cn + ".example"}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, issuer, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return [][]*x509.Certificate{{c}}
}

// A caller named by its certificate is its issuer and subject: the same
// subject from another CA is another principal; no verified certificate
// is no caller, whatever token comes beside it.
func TestClientCertificatePrincipal(t *testing.T) {
	a := mustNew(t, Options{FromClientCert: true, BearerTokens: []string{"tok"}})
	as := func(chains [][]*x509.Certificate) (*Principal, error) {
		r := request("Bearer tok")
		if chains != nil {
			r.TLS = &tls.ConnectionState{VerifiedChains: chains}
		}
		return a.Authenticate(context.Background(), r)
	}
	alice := certificate(t, "ca-one", "alice")
	p, err := as(alice)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Keyed || !p.Expires.Equal(alice[0][0].NotAfter) || p.Claims["cn"][0] != "alice" || p.Claims["o"][0] != "acme" || p.Claims["dns"][0] != "alice.example" {
		t.Errorf("alice's principal: %+v", p)
	}
	if other, err := as(certificate(t, "ca-two", "alice")); err != nil || other.ID == p.ID {
		t.Errorf("alice of another CA: %+v, %v; want another principal than %s", other, err, p.ID)
	}
	if again, _ := as(certificate(t, "ca-one", "alice")); again == nil || again.ID != p.ID {
		t.Errorf("a renewed certificate: %+v; want %s", again, p.ID)
	}
	if _, err := as(nil); !errors.Is(err, ErrNoToken) {
		t.Errorf("no certificate, a good token beside: %v, want ErrNoToken", err)
	}
}
