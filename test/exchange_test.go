package test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// sts is a security token service (RFC 8693) of zitadel's OpenID
// provider, which is also the organization's identity provider: it mints
// the callers' JWTs, and exchanges them for JWT access tokens whose aud is
// the audience asked for. It counts its token requests per subject token
// and per subject token and audience, and keeps the assertions of its JWT
// bearer grants (RFC 7523), which it accepts signed by a workload key.
type sts struct {
	URL      string
	provider op.OpenIDProvider
	store    *storage.Storage
	srv      *httptest.Server

	mu         sync.Mutex
	requests   map[string]int // subject token → token requests
	audiences  map[string]int // subject token and audience → token requests
	assertions []string       // the assertion of each JWT bearer grant
	lifetime   time.Duration  // of the tokens it issues; 0: the storage's five minutes
	failing    int            // an HTTP status every token request gets, unless 0
	refused    string         // an audience refused with invalid_target
	workload   map[string]*rsa.PublicKey
}

// stsClients registers Manifold at the STS: the example storage keeps
// clients in a map of its package, written once per test binary.
var stsClients sync.Once

type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

type stsStorage struct {
	*storage.Storage
	s *sts
}

func (s stsStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return jwtClient{c}, nil
}

// CreateAccessToken issues the storage's token, with the STS's lifetime
// unless it is a caller's own.
func (s stsStorage) CreateAccessToken(ctx context.Context, r op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, r)
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	if _, caller := r.(callerRequest); err == nil && !caller && s.s.lifetime > 0 {
		exp = time.Now().Add(s.s.lifetime)
	}
	return id, exp, err
}

// ValidateTokenExchangeRequest refuses the refused audience as an
// invalid target, and mallory's token as an invalid grant.
func (s stsStorage) ValidateTokenExchangeRequest(ctx context.Context, r op.TokenExchangeRequest) error {
	s.s.mu.Lock()
	refused := s.s.refused
	s.s.mu.Unlock()
	if refused != "" && slices.Contains(r.GetAudience(), refused) {
		return oidc.ErrInvalidTarget().WithDescription("no token for %s here", refused)
	}
	if r.GetSubject() == "mallory" {
		return oidc.ErrInvalidGrant().WithDescription("mallory's token may not be exchanged")
	}
	return s.Storage.ValidateTokenExchangeRequest(ctx, r)
}

// GetKeyByIDAndClientID is the workload key of that id, whoever the
// assertion's issuer.
func (s stsStorage) GetKeyByIDAndClientID(ctx context.Context, keyID, clientID string) (*jose.JSONWebKey, error) {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	k, ok := s.s.workload[keyID]
	if !ok {
		return nil, fmt.Errorf("no workload key %q", keyID)
	}
	return &jose.JSONWebKey{KeyID: keyID, Use: "sig", Key: k}, nil
}

// JWTProfileTokenType has JWT bearer grants issue JWTs, which an upstream
// checks with the STS's keys.
func (stsStorage) JWTProfileTokenType(context.Context, op.TokenRequest) (op.AccessTokenType, error) {
	return op.AccessTokenTypeJWT, nil
}

// callerRequest mints a caller's access token for Manifold.
type callerRequest struct{ sub string }

func (r callerRequest) GetSubject() string    { return r.sub }
func (r callerRequest) GetAudience() []string { return []string{"manifold"} }
func (r callerRequest) GetScopes() []string   { return []string{"openid"} }

func startSTS(t *testing.T) *sts {
	t.Helper()
	users := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(users, []byte(`{"alice":{"ID":"alice","Username":"alice","IsAdmin":true},"bob":{"ID":"bob","Username":"bob","IsAdmin":true},"mallory":{"ID":"mallory","Username":"mallory","IsAdmin":true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	us, err := storage.StoreFromFile(users)
	if err != nil {
		t.Fatal(err)
	}
	stsClients.Do(func() { storage.RegisterClients(storage.WebClient("manifold", "manifold-secret")) })
	s := &sts{store: storage.NewStorage(us), requests: map[string]int{}, audiences: map[string]int{}, workload: map[string]*rsa.PublicKey{}}
	s.srv = httptest.NewUnstartedServer(nil)
	s.URL = "http://" + s.srv.Listener.Addr().String()
	s.provider, err = op.NewOpenIDProvider(s.URL, &op.Config{CryptoKey: [32]byte{1}, CodeMethodS256: true}, stsStorage{s.store, s}, op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/oauth/token" {
			_ = r.ParseForm()
			s.mu.Lock()
			sub, failing := r.PostForm.Get("subject_token"), s.failing
			s.requests[sub]++
			s.audiences[sub+" "+r.PostForm.Get("audience")]++
			if a := r.PostForm.Get("assertion"); a != "" {
				s.assertions = append(s.assertions, a)
			}
			s.mu.Unlock()
			if failing != 0 {
				http.Error(w, "the token service is failing", failing)
				return
			}
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
	c, err := stsStorage{s.store, s}.GetClientByClientID(ctx, "manifold")
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

// exchangesFor counts the exchanges of tok asked for audience.
func (s *sts) exchangesFor(tok, audience string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.audiences[tok+" "+audience]
}

// set changes the STS's behaviour under its lock.
func (s *sts) set(f func(*sts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// stsUpstream is the whoami server accepting only JWTs the STS signed for
// its audience (aud: its own URL unless told another), answering as their
// subject; seen is every Authorization it was sent, auds the audiences of
// the tokens it accepted.
type stsUpstream struct {
	URL  string
	mu   sync.Mutex
	seen []string
	auds [][]string
}

func startSTSUpstream(t *testing.T, s *sts) *stsUpstream {
	return startSTSUpstreamFor(t, s, "")
}

// startSTSUpstreamFor is an stsUpstream accepting tokens for audience
// ("": its URL). It publishes its protected resource metadata, naming the
// STS as its authorization server.
func startSTSUpstreamFor(t *testing.T, s *sts, audience string) *stsUpstream {
	t.Helper()
	u := &stsUpstream{}
	srv := httptest.NewUnstartedServer(nil)
	u.URL = "http://" + srv.Listener.Addr().String() + "/mcp"
	if audience == "" {
		audience = u.URL
	}
	mcpHandler := modernHandler(whoamiServer())
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/oauth-protected-resource") {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"resource":%q,"authorization_servers":[%q]}`, u.URL, s.URL)
			return
		}
		h := r.Header.Get("Authorization")
		u.mu.Lock()
		u.seen = append(u.seen, h)
		u.mu.Unlock()
		keys, err := jwk.Fetch(r.Context(), s.URL+"/keys")
		if err != nil {
			http.Error(w, "no keys", http.StatusInternalServerError)
			return
		}
		tok, err := jwt.Parse([]byte(strings.TrimPrefix(h, "Bearer ")), jwt.WithKeySet(keys), jwt.WithAudience(audience))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		sub, _ := tok.Subject()
		aud, _ := tok.Audience()
		u.mu.Lock()
		u.auds = append(u.auds, aud)
		u.mu.Unlock()
		r.Header.Set("X-Token-User", sub)
		mcpHandler.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return u
}

// audiences is the audiences of the tokens the upstream accepted.
func (u *stsUpstream) audiences() [][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]string(nil), u.auds...)
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

// TestOAuthExchangeRefusedOrDown: the STS refusing (Manifold's secret
// wrong: invalid_client; the caller's token not exchangeable:
// invalid_grant; the audience not served: invalid_target) is a -32603
// naming the upstream and the refusal; the STS down (connection refused)
// or failing (5xx) is HTTP 503 with Retry-After: the caller's token may be
// good.
func TestOAuthExchangeRefusedOrDown(t *testing.T) {
	s := startSTS(t)
	up := startSTSUpstream(t, s)
	alice, mallory := s.mint(t, "alice"), s.mint(t, "mallory")
	refusedAs := func(name string, p *proxy, token, refusal string) {
		t.Helper()
		r := callExchanged(t, p.URL, token, "crm_whoami")
		if r.Error == nil || r.Error.Code != -32603 || !strings.Contains(r.Error.Message, "crm") ||
			!strings.Contains(r.Error.Message, "refused") || !strings.Contains(r.Error.Message, refusal) {
			t.Errorf("%s: HTTP %d %s; want -32603 naming crm and %s", name, r.Status, r.Body, refusal)
		}
	}
	refusedAs("STS refusing Manifold", exchangeProxy(t, s, up.URL, s.URL+"/oauth/token", "not-the-secret"), alice, "invalid_client")
	good := exchangeProxy(t, s, up.URL, s.URL+"/oauth/token", "manifold-secret")
	refusedAs("STS refusing the caller's token", good, mallory, "invalid_grant")
	s.set(func(s *sts) { s.refused = "urn:example:nowhere" })
	elsewhere := startProxy(t, fmt.Sprintf(`auth:
  jwt: {issuer: %q, audiences: [manifold], jwks_url: %q}
upstreams:
  - name: crm
    url: %s
    oauth: {mode: exchange, token_endpoint: %q, client_id: manifold, client_secret: manifold-secret, audience: "urn:example:nowhere"}
`, s.URL, s.URL+"/keys", up.URL, s.URL+"/oauth/token"))
	refusedAs("STS refusing the audience", elsewhere, alice, "invalid_target")

	unavailable := func(name string, p *proxy) {
		t.Helper()
		r := callExchanged(t, p.URL, alice, "crm_whoami")
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Error == nil || !strings.Contains(r.Error.Message, "crm") {
			t.Errorf("%s: HTTP %d Retry-After %q %s", name, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/oauth/token"
	l.Close()
	unavailable("STS down", exchangeProxy(t, s, up.URL, closed, "manifold-secret"))
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusBadGateway} {
		s.set(func(s *sts) { s.failing = status })
		unavailable(fmt.Sprintf("STS failing with %d", status), good)
	}
	s.set(func(s *sts) { s.failing = 0 })
	if got := answerText(t, callExchanged(t, good.URL, alice, "crm_whoami")); got != "you are alice" {
		t.Errorf("with the STS back: %s", got)
	}
	for _, h := range up.sent() {
		if strings.Contains(h, alice) || strings.Contains(h, mallory) {
			t.Error("a caller's own token reached the upstream")
		}
	}
}

// callExchanged calls tool as the caller of token, on raw HTTP.
func callExchanged(t *testing.T, url, token, tool string) *rawResponse {
	t.Helper()
	return post(t, url, withToken(headers("tools/call", tool), token),
		fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":{},%s}}`, tool, oauthMeta))
}

// answerText is the text a call completed with, else the error it got.
func answerText(t *testing.T, r *rawResponse) string {
	t.Helper()
	if r.Error != nil {
		return fmt.Sprintf("HTTP %d error %d: %s", r.Status, r.Error.Code, r.Error.Message)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	r.result(t, &res)
	if len(res.Content) == 0 {
		return string(r.Body)
	}
	return res.Content[0].Text
}

// TestOAuthExchangePerAudience: two upstreams in mode exchange, one asking
// for its URL as the audience (the default), the other for an audience of
// its own: each receives a token exchanged for its audience, never the
// caller's own token nor the other's, and the STS is asked once per
// caller and upstream while the tokens live.
func TestOAuthExchangePerAudience(t *testing.T) {
	s := startSTS(t)
	crm := startSTSUpstream(t, s)
	hr := startSTSUpstreamFor(t, s, "urn:example:hr")
	p := startProxy(t, fmt.Sprintf(`auth:
  jwt: {issuer: %q, audiences: [manifold], jwks_url: %q}
upstreams:
  - name: crm
    url: %s
    oauth: {mode: exchange, token_endpoint: %q, client_id: manifold, client_secret: manifold-secret}
  - name: hr
    url: %s
    oauth: {mode: exchange, token_endpoint: %q, client_id: manifold, client_secret: manifold-secret, audience: "urn:example:hr"}
`, s.URL, s.URL+"/keys", crm.URL, s.URL+"/oauth/token", hr.URL, s.URL+"/oauth/token"))
	alice, bob := s.mint(t, "alice"), s.mint(t, "bob")
	for round := range 3 {
		for _, c := range []struct{ name, token string }{{"alice", alice}, {"bob", bob}} {
			for _, tool := range []string{"crm_whoami", "hr_whoami"} {
				if got := answerText(t, callExchanged(t, p.URL, c.token, tool)); got != "you are "+c.name {
					t.Fatalf("round %d, %s calling %s: %s", round, c.name, tool, got)
				}
			}
		}
	}
	for _, c := range []struct{ name, token string }{{"alice", alice}, {"bob", bob}} {
		if n := s.exchangesFor(c.token, crm.URL); n != 1 {
			t.Errorf("%s's exchanges for crm's audience: %d, want 1", c.name, n)
		}
		if n := s.exchangesFor(c.token, "urn:example:hr"); n != 1 {
			t.Errorf("%s's exchanges for hr's audience: %d, want 1", c.name, n)
		}
	}
	for _, u := range []struct {
		name, audience string
		up             *stsUpstream
	}{{"crm", crm.URL, crm}, {"hr", "urn:example:hr", hr}} {
		auds := u.up.audiences()
		if len(auds) == 0 {
			t.Errorf("%s accepted no token", u.name)
		}
		for _, aud := range auds {
			if !slices.Equal(aud, []string{u.audience}) {
				t.Errorf("%s accepted a token for %v, want %q alone", u.name, aud, u.audience)
			}
		}
		for _, h := range u.up.sent() {
			if strings.Contains(h, alice) || strings.Contains(h, bob) {
				t.Errorf("a caller's own token reached %s", u.name)
			}
		}
	}
	crmSent := map[string]bool{}
	for _, h := range crm.sent() {
		crmSent[h] = h != ""
	}
	for _, h := range hr.sent() {
		if crmSent[h] {
			t.Error("hr was sent the token exchanged for crm")
		}
	}
}

// TestOAuthExchangeRenewedBeforeExpiry: an exchanged token living four
// seconds is exchanged again shortly before it expires: calls made across
// its expiry are all served, and the STS sees a second exchange.
func TestOAuthExchangeRenewedBeforeExpiry(t *testing.T) {
	s := startSTS(t)
	s.set(func(s *sts) { s.lifetime = 4 * time.Second })
	up := startSTSUpstream(t, s)
	p := exchangeProxy(t, s, up.URL, s.URL+"/oauth/token", "manifold-secret")
	alice := s.mint(t, "alice")
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if got := answerText(t, callExchanged(t, p.URL, alice, "crm_whoami")); got != "you are alice" {
			t.Fatalf("after %d exchanges: %s", s.requestsFor(alice), got)
		}
	}
	if n := s.requestsFor(alice); n < 2 {
		t.Errorf("%d exchanges over seven seconds of a token living four, want it exchanged again", n)
	}
	for _, h := range up.sent() {
		if h != "" && !strings.HasPrefix(h, "Bearer ") {
			t.Errorf("the upstream was sent %q", h)
		}
	}
}

// TestOAuthExchangeSharedThroughRedis: two replicas share a Redis: the
// token replica a exchanged serves alice on replica b, with no second
// exchange, and Redis holds neither it nor alice's own token in clear.
func TestOAuthExchangeSharedThroughRedis(t *testing.T) {
	s := startSTS(t)
	up := startSTSUpstream(t, s)
	rs := redistest.Start(t)
	replica := func() *proxy {
		return startProxy(t, fmt.Sprintf(`auth:
  jwt: {issuer: %q, audiences: [manifold], jwks_url: %q}
cache: {secret: s3cret-0123456789, redis: {url: %s}}
upstreams:
  - name: crm
    url: %s
    oauth: {mode: exchange, token_endpoint: %q, client_id: manifold, client_secret: manifold-secret}
`, s.URL, s.URL+"/keys", rs.URL(), up.URL, s.URL+"/oauth/token"))
	}
	a, b := replica(), replica()
	alice := s.mint(t, "alice")
	if got := answerText(t, callExchanged(t, a.URL, alice, "crm_whoami")); got != "you are alice" {
		t.Fatalf("on a: %s", got)
	}
	if got := answerText(t, callExchanged(t, b.URL, alice, "crm_whoami")); got != "you are alice" {
		t.Fatalf("on b: %s", got)
	}
	if n := s.requestsFor(alice); n != 1 {
		t.Errorf("%d exchanges for alice on two replicas sharing a Redis, want 1", n)
	}
	secrets := []string{alice}
	for _, h := range up.sent() {
		if tok := strings.TrimPrefix(h, "Bearer "); tok != "" {
			secrets = append(secrets, tok)
		}
	}
	if len(secrets) < 2 {
		t.Fatal("the upstream was sent no exchanged token")
	}
	ctx := context.Background()
	keys, _ := rs.Client().Keys(ctx, "*:tok:crm:*").Result()
	if len(keys) != 1 {
		t.Fatalf("Redis holds %v for crm's tokens, want alice's grant alone", keys)
	}
	if v := redisValue(t, rs, keys[0]); !strings.Contains(v, "d=") {
		t.Fatalf("alice's grant in Redis: %q", v)
	}
	sigs := make([]string, len(secrets)) // a JWT's signature alone is a secret
	for i, sec := range secrets {
		sigs[i] = sec[strings.LastIndexByte(sec, '.')+1:]
	}
	assertNoSecretsKept(t, rs, []*proxy{a, b}, sigs...)
}

// workloadJWT is a workload's JWT for the STS, as a platform projects it
// (a Kubernetes service account token): signed with a key the STS knows
// by kid, about workload-1, for the STS.
func workloadJWT(t *testing.T, s *sts, kid string) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s.set(func(s *sts) { s.workload[kid] = &k.PublicKey })
	priv, err := jwk.Import(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := priv.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.NewBuilder().Issuer("workload-1").Subject("workload-1").Audience([]string{s.URL}).
		JwtID(kid).IssuedAt(now).Expiration(now.Add(time.Hour)).Build()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.RS256(), priv))
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

// TestOAuthWorkloadAssertionRotated: mode workload presents the JWT in
// assertion_file with the JWT bearer grant; when the platform rotates the
// file (a new token renamed over it), the next token request presents the
// new JWT, and the calls go on being served.
func TestOAuthWorkloadAssertionRotated(t *testing.T) {
	s := startSTS(t)
	s.set(func(s *sts) { s.lifetime = 3 * time.Second })
	up := startSTSUpstreamFor(t, s, s.URL) // a JWT bearer grant's token is for the assertion's audience
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	first := workloadJWT(t, s, "wl-1")
	if err := os.WriteFile(file, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, fmt.Sprintf(`auth:
  jwt: {issuer: %q, audiences: [manifold], jwks_url: %q}
upstreams:
  - name: crm
    url: %s
    oauth: {mode: workload, assertion_file: %q}
`, s.URL, s.URL+"/keys", up.URL, file))
	alice := s.mint(t, "alice")
	if got := answerText(t, callExchanged(t, p.URL, alice, "crm_whoami")); got != "you are workload-1" {
		t.Fatalf("with the first JWT: %s", got)
	}
	second := workloadJWT(t, s, "wl-2")
	rotated := filepath.Join(dir, "token.new")
	if err := os.WriteFile(rotated, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(rotated, file); err != nil {
		t.Fatal(err)
	}
	assertions := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]string(nil), s.assertions...)
	}
	for end := time.Now().Add(10 * time.Second); len(assertions()) < 2 && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if got := answerText(t, callExchanged(t, p.URL, alice, "crm_whoami")); got != "you are workload-1" {
			t.Fatalf("after %d token requests: %s", len(assertions()), got)
		}
	}
	got := assertions()
	if len(got) < 2 {
		t.Fatalf("%d token requests over ten seconds of tokens living three", len(got))
	}
	if got[0] != first {
		t.Error("the first token request did not present the JWT in the file")
	}
	if got[1] != second {
		t.Errorf("after the rotation, the token request presented the %s JWT, want the new one", map[bool]string{true: "old", false: "unknown"}[got[1] == first])
	}
	for _, h := range up.sent() {
		if strings.Contains(h, alice) || strings.Contains(h, first) || strings.Contains(h, second) {
			t.Error("the upstream was sent the caller's token or the workload's JWT")
		}
	}
}
