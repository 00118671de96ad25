package test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// authServer is an OAuth authorization server and the MCP server it
// protects, run by the test: RFC 8414 metadata, dynamic registration, an
// authorization endpoint that approves at once for the user its browser
// names (the X-Test-User header, else the one signed in), a token
// endpoint that checks the code, PKCE and the redirect, and issues opaque
// tokens with refresh tokens (rotated on each refresh); and a go-sdk
// server whose tool whoami answers with the user of the token it was
// called with, behind a bearer check that answers 401 with the RFC 9728
// challenge.
type authServer struct {
	URL, MCP string

	mu        sync.Mutex
	expiresIn int
	codes     map[string]authCode
	access    map[string]string // access token → user
	refresh   map[string]string // refresh token → user
	n         int
	exchanges int // authorization_code grants
	refreshes int
	seen      []string // the tokens the MCP server was called with, in order
	legacyBy  []string // the users of the requests it got in a legacy era (no Mcp-Method)
	// authorizations counts the requests of its authorization endpoint;
	// signedIn is the user a browser without X-Test-User is signed in as.
	authorizations int
	signedIn       string
	// reusableCodes makes a code good as often as it comes: a server that
	// does not enforce single use, for a test that Manifold does.
	reusableCodes bool
	// gate, when set, holds each request for the resource metadata until
	// it is closed; held counts the requests that came.
	gate chan struct{}
	held atomic.Int32
	// dpop, when set, makes the server require DPoP-bound tokens.
	dpop *dpopServer

	registrations int // the dynamic registrations it answered
	// openDiscover, when set, has the MCP server answer server/discover
	// to anyone, as a server that tells what it is before its user signs
	// in does; every other request still needs a token.
	openDiscover bool
}

type authCode struct {
	user, redirect, challenge, resource string
}

func newAuthServer(t *testing.T) *authServer {
	return newAuthServerOf(t, func(*authServer) http.Handler { return modernHandler(whoamiServer()) })
}

// newSessionAuthServer is newAuthServer whose MCP server keeps 2025-11-25
// sessions (a stateful go-sdk handler), each bound, as the go-sdk binds
// them, to the user of the token that opened it: a request of another
// user's token in it is refused 403.
func newSessionAuthServer(t *testing.T) *authServer {
	return newAuthServerOf(t, func(a *authServer) http.Handler {
		verify := func(_ context.Context, tok string, _ *http.Request) (*sdkauth.TokenInfo, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			user, ok := a.access[tok]
			if !ok {
				return nil, sdkauth.ErrInvalidToken
			}
			return &sdkauth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return sdkauth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return whoamiServer() }, nil))
	})
}

// newAuthServerOf is the authorization server in front of the MCP server
// mcpServer makes.
func newAuthServerOf(t *testing.T, mcpServer func(*authServer) http.Handler) *authServer {
	a := &authServer{}
	srv := httptest.NewServer(a.routes(mcpServer))
	t.Cleanup(srv.Close)
	a.URL, a.MCP = srv.URL, srv.URL+"/mcp"
	return a
}

// newSwitchableAuthServer is newAuthServer on a switchable listener: the
// test takes the authorization server and the MCP server down, and back on
// the same address.
func newSwitchableAuthServer(t *testing.T) (*authServer, *switchable) {
	a := &authServer{}
	s := newSwitchable(t, a.routes(func(*authServer) http.Handler { return modernHandler(whoamiServer()) }))
	a.URL, a.MCP = "http://"+s.addr, s.URL()
	return a, s
}

// routes serves a's endpoints, and the MCP server mcpServer makes on /mcp.
func (a *authServer) routes(mcpServer func(*authServer) http.Handler) http.Handler {
	a.expiresIn, a.codes, a.access, a.refresh = 3600, map[string]authCode{}, map[string]string{}, map[string]string{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		gate := a.gate
		a.mu.Unlock()
		if gate != nil {
			a.held.Add(1)
			<-gate
		}
		m := map[string]any{"resource": a.MCP, "authorization_servers": []string{a.URL}, "scopes_supported": []string{"crm:read"}}
		if a.dpop != nil && a.dpop.inMetadata {
			m["dpop_bound_access_tokens_required"] = true
		}
		writeJSON(w, m)
	})
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		m := map[string]any{"issuer": a.URL, "authorization_endpoint": a.URL + "/authorize", "token_endpoint": a.URL + "/token",
			"registration_endpoint": a.URL + "/register", "code_challenge_methods_supported": []string{"S256"},
			"scopes_supported": []string{"crm:read", "offline_access"}, "token_endpoint_auth_methods_supported": []string{"none"},
			"authorization_response_iss_parameter_supported": true}
		if a.dpop != nil && a.dpop.algs != nil {
			m["dpop_signing_alg_values_supported"] = a.dpop.algs
		}
		writeJSON(w, m)
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		a.registrations++
		a.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		writeJSON(w, map[string]any{"client_id": "manifold-client", "token_endpoint_auth_method": "none"})
	})
	mux.HandleFunc("GET /authorize", a.authorize)
	mux.HandleFunc("POST /token", a.token)
	mux.Handle("/mcp", a.protect(mcpServer(a)))
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (a *authServer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a.mu.Lock()
	a.authorizations++
	user := cmp.Or(r.Header.Get("X-Test-User"), a.signedIn)
	a.mu.Unlock()
	if user == "" || q.Get("code_challenge_method") != "S256" || q.Get("resource") != a.MCP {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.n++
	code := fmt.Sprintf("code-%d", a.n)
	a.codes[code] = authCode{user: user, redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"), resource: q.Get("resource")}
	a.mu.Unlock()
	back, _ := url.Parse(q.Get("redirect_uri"))
	v := back.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	v.Set("iss", a.URL)
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (a *authServer) token(w http.ResponseWriter, r *http.Request) {
	jkt, ok := a.dpop.tokenProof(w, r, a.URL+"/token")
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var user string
	switch r.FormValue("grant_type") {
	case "authorization_code":
		c, ok := a.codes[r.FormValue("code")]
		if !a.reusableCodes {
			delete(a.codes, r.FormValue("code")) // a code is good once
		}
		sum := sha256.Sum256([]byte(r.FormValue("code_verifier")))
		if !ok || c.redirect != r.FormValue("redirect_uri") || c.resource != r.FormValue("resource") ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]string{"error": "invalid_grant"})
			return
		}
		a.exchanges++
		user = c.user
	case "refresh_token":
		u, ok := a.refresh[r.FormValue("refresh_token")]
		delete(a.refresh, r.FormValue("refresh_token"))
		if !ok || !a.dpop.boundTo(r.FormValue("refresh_token"), jkt) {
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]string{"error": "invalid_grant"})
			return
		}
		a.refreshes++
		user = u
	}
	a.n++
	at, rt := fmt.Sprintf("at-%s-%d", user, a.n), fmt.Sprintf("rt-%s-%d", user, a.n)
	a.access[at], a.refresh[rt] = user, user
	writeJSON(w, map[string]any{"access_token": at, "token_type": a.dpop.bind(jkt, at, rt), "expires_in": a.expiresIn, "refresh_token": rt, "scope": "crm:read offline_access"})
}

// protect admits a request with an access token the server issued.
func (a *authServer) protect(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metadata := a.URL + "/.well-known/oauth-protected-resource/mcp"
		tok, ok := a.dpop.resourceProof(w, r, a.MCP, metadata)
		if !ok {
			return
		}
		a.mu.Lock()
		user, ok := a.access[tok]
		a.seen = append(a.seen, tok)
		open := a.openDiscover && r.Header.Get("Mcp-Method") == "server/discover"
		a.mu.Unlock()
		if open {
			h.ServeHTTP(w, r)
			return
		}
		if !ok && a.dpop != nil {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`DPoP error="invalid_token", algs="ES256", resource_metadata=%q`, metadata))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="invalid_token", resource_metadata=%q`, metadata))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Mcp-Method") == "" {
			a.mu.Lock()
			a.legacyBy = append(a.legacyBy, user)
			a.mu.Unlock()
		}
		r.Header.Set("X-Token-User", user)
		h.ServeHTTP(w, r)
	})
}

// revoke makes the server refuse user's tokens: its access tokens, and,
// with refresh, its refresh tokens too.
func (a *authServer) revoke(user string, refresh bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for tok, u := range a.access {
		if u == user {
			delete(a.access, tok)
		}
	}
	if refresh {
		for tok, u := range a.refresh {
			if u == user {
				delete(a.refresh, tok)
			}
		}
	}
}

func (a *authServer) counts() (exchanges, refreshes int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exchanges, a.refreshes
}

func (a *authServer) registrationCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.registrations
}

// whoamiServer's tool whoami answers with the user of the token it was
// called with (the X-Token-User header the bearer check sets).
func whoamiServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "crm", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "whoami", InputSchema: objectSchema(`{}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("you are " + req.Extra.Header.Get("X-Token-User")), nil
	})
	return s
}
