package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// sts is a security token service (RFC 8693) of zitadel's OpenID
// provider, which is also the organization's identity provider: it mints
// the callers' JWTs, and exchanges them for JWT access tokens whose aud is
// the audience asked for. It counts its token requests per subject token.
type sts struct {
	URL      string
	provider op.OpenIDProvider
	store    *storage.Storage
	srv      *httptest.Server

	mu       sync.Mutex
	requests map[string]int // subject token → token requests
}

// stsClients registers Manifold at the STS: the example storage keeps
// clients in a map of its package, written once per test binary.
var stsClients sync.Once

type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

type stsStorage struct{ *storage.Storage }

func (s stsStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return jwtClient{c}, nil
}

// callerRequest mints a caller's access token for Manifold.
type callerRequest struct{ sub string }

func (r callerRequest) GetSubject() string    { return r.sub }
func (r callerRequest) GetAudience() []string { return []string{"manifold"} }
func (r callerRequest) GetScopes() []string   { return []string{"openid"} }

func startSTS(t *testing.T) *sts {
	t.Helper()
	users := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(users, []byte(`{"alice":{"ID":"alice","Username":"alice","IsAdmin":true},"bob":{"ID":"bob","Username":"bob","IsAdmin":true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	us, err := storage.StoreFromFile(users)
	if err != nil {
		t.Fatal(err)
	}
	stsClients.Do(func() { storage.RegisterClients(storage.WebClient("manifold", "manifold-secret")) })
	s := &sts{store: storage.NewStorage(us), requests: map[string]int{}}
	s.srv = httptest.NewUnstartedServer(nil)
	s.URL = "http://" + s.srv.Listener.Addr().String()
	s.provider, err = op.NewOpenIDProvider(s.URL, &op.Config{CryptoKey: [32]byte{1}, CodeMethodS256: true}, stsStorage{s.store}, op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/oauth/token" {
			_ = r.ParseForm()
			s.mu.Lock()
			s.requests[r.PostForm.Get("subject_token")]++
			s.mu.Unlock()
		}
		s.provider.ServeHTTP(w, r)
	})
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

// mint is a caller's JWT for Manifold, from the STS as the IdP.
func (s *sts) mint(t *testing.T, sub string) string {
	t.Helper()
	ctx := op.ContextWithIssuer(context.Background(), s.URL)
	c, err := stsStorage{s.store}.GetClientByClientID(ctx, "manifold")
	if err != nil {
		t.Fatal(err)
	}
	tok, _, _, err := op.CreateAccessToken(ctx, callerRequest{sub}, op.AccessTokenTypeJWT, s.provider, c, "")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *sts) requestsFor(tok string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[tok]
}

// stsUpstream is the whoami server accepting only JWTs the STS signed for
// its own URL (aud), answering as their subject; seen is every
// Authorization it was sent.
type stsUpstream struct {
	URL  string
	mu   sync.Mutex
	seen []string
}

func startSTSUpstream(t *testing.T, s *sts) *stsUpstream {
	t.Helper()
	u := &stsUpstream{}
	srv := httptest.NewUnstartedServer(nil)
	u.URL = "http://" + srv.Listener.Addr().String() + "/mcp"
	mcpHandler := modernHandler(whoamiServer())
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		u.mu.Lock()
		u.seen = append(u.seen, h)
		u.mu.Unlock()
		keys, err := jwk.Fetch(r.Context(), s.URL+"/keys")
		if err != nil {
			http.Error(w, "no keys", http.StatusInternalServerError)
			return
		}
		tok, err := jwt.Parse([]byte(strings.TrimPrefix(h, "Bearer ")), jwt.WithKeySet(keys), jwt.WithAudience(u.URL))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		sub, _ := tok.Subject()
		r.Header.Set("X-Token-User", sub)
		mcpHandler.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return u
}

func (u *stsUpstream) sent() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func exchangeProxy(t *testing.T, s *sts, upstreamURL, tokenEndpoint, secret string) *proxy {
	return startProxy(t, fmt.Sprintf(`auth:
  jwt: {issuer: %q, audiences: [manifold], jwks_url: %q}
upstreams:
  - name: crm
    url: %s
    oauth: {mode: exchange, token_endpoint: %q, client_id: manifold, client_secret: %q}
`, s.URL, s.URL+"/keys", upstreamURL, tokenEndpoint, secret))
}

// TestOAuthExchangePerPrincipal: with mode exchange, each caller's JWT is
// exchanged at the STS for a token for the upstream, one per principal and
// kept (a second call asks the STS nothing), and the caller's own token
// never reaches the upstream.
func TestOAuthExchangePerPrincipal(t *testing.T) {
	s := startSTS(t)
	up := startSTSUpstream(t, s)
	p := exchangeProxy(t, s, up.URL, s.URL+"/oauth/token", "manifold-secret")
	alice, bob := s.mint(t, "alice"), s.mint(t, "bob")
	for round := range 3 {
		if a, b := whoami(t, p.URL, alice, ""), whoami(t, p.URL, bob, ""); a.text != "you are alice" || b.text != "you are bob" {
			t.Fatalf("round %d: alice %+v, bob %+v", round, a, b)
		}
	}
	if a, b := s.requestsFor(alice), s.requestsFor(bob); a != 1 || b != 1 {
		t.Errorf("token exchanges: alice %d, bob %d; want one each, kept for later calls", a, b)
	}
	for _, h := range up.sent() {
		if strings.Contains(h, alice) || strings.Contains(h, bob) {
			t.Fatal("a caller's own token reached the upstream")
		}
	}
}

// TestOAuthExchangeRefusedOrDown: the STS refusing (Manifold's secret is
// wrong) is a -32603 naming the upstream; the STS down is HTTP 503 with
// Retry-After: the caller's token may be good.
func TestOAuthExchangeRefusedOrDown(t *testing.T) {
	s := startSTS(t)
	up := startSTSUpstream(t, s)
	refusing := exchangeProxy(t, s, up.URL, s.URL+"/oauth/token", "not-the-secret")
	alice := s.mint(t, "alice")
	r := post(t, refusing.URL, withToken(headers("tools/call", "crm_whoami"), alice),
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crm_whoami","arguments":{},`+oauthMeta+`}}`)
	if r.Error == nil || r.Error.Code != -32603 || !strings.Contains(r.Error.Message, "crm") || !strings.Contains(r.Error.Message, "refused") {
		t.Errorf("STS refusing: HTTP %d %s", r.Status, r.Body)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/oauth/token"
	l.Close()
	down := exchangeProxy(t, s, up.URL, closed, "manifold-secret")
	r = post(t, down.URL, withToken(headers("tools/call", "crm_whoami"), alice),
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crm_whoami","arguments":{},`+oauthMeta+`}}`)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Error == nil || !strings.Contains(r.Error.Message, "crm") {
		t.Errorf("STS down: HTTP %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	for _, h := range up.sent() {
		if h != "" { // its health knocks go with no token
			t.Errorf("the upstream was sent %q with no exchanged token to send", h)
		}
	}
}
