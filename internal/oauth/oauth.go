// Package oauth makes Manifold the OAuth client of an upstream MCP server
// that the MCP authorization specification protects, on behalf of each
// caller (mode user: authorization code with PKCE, after the caller's user
// consents) or of Manifold itself (mode client_credentials).
//
// A Client is the client of one upstream. Its Transport puts the caller's
// token on each request to the server; a request without one, or one the
// server refuses (401), leads to discovery: the protected resource metadata
// the challenge names (else the well-known URLs), whose resource must be the
// upstream's URL, then the metadata of its authorization server, whose
// issuer must be the one it was discovered by. The client registers there
// (a configured client id, else its Client ID Metadata Document where the
// server supports one, else dynamic registration), and the request fails
// with a *ConsentRequired naming the authorization URL: the router asks the
// caller's user to open it (URL-mode elicitation). The authorization server
// sends the user back to Manifold's callback (Callback), which finds the
// pending authorization by its state alone (single use, short-lived, bound
// to the principal it was made for), checks the issuer (RFC 9207),
// exchanges the code, and stores the tokens. The caller's retry then finds
// them.
//
// What the client must remember (registrations per issuer, pending
// authorizations, tokens per principal) lives in a Store: in process, or in
// Redis for every replica (guarded by a bounded wait and a breaker), each
// value sealed with a key of its own principal's and versioned, the store
// comparing versions as it writes or drops. In front of it, each replica
// holds the newest grant it knows per principal (held.go), so that a grant
// the store could not take is neither lost nor replaced by the older one
// still stored, and a rotated refresh token is never sent again. Tokens are
// refreshed before they expire and after the server refuses them, dropped
// when the authorization server itself refuses the refresh, and never
// logged, forwarded to another upstream or shown to a caller.
package oauth

import (
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Modes.
const (
	ModeUser              = "user"
	ModeClientCredentials = "client_credentials"
)

// Options configure the client of one upstream.
type Options struct {
	// Upstream names the upstream (for logs and store keys); Resource is
	// its URL, the RFC 8707 resource every token is for.
	Upstream string
	Resource string
	Mode     string
	// ClientID and ClientSecret, when set, are a registration made by the
	// operator; PrivateKey, with ClientID, authenticates the
	// client_credentials grant with private_key_jwt.
	ClientID     string
	ClientSecret string
	PrivateKey   crypto.Signer
	// MetadataURL is the client's Client ID Metadata Document, used as its
	// client id where the authorization server supports them.
	MetadataURL string
	// Scopes are asked for when neither the challenge nor the metadata
	// names any.
	Scopes []string
	// TokenEndpoint is the security token service of mode exchange, and
	// Audience the exchanged token's (default: Resource). IdP is the
	// identity provider of mode enterprise; AssertionFile the workload
	// JWT of mode workload.
	TokenEndpoint string
	Audience      string
	IdP           IdP
	AssertionFile string
	// RedirectURI is Manifold's callback, {public_url}/oauth/callback;
	// ConnectURI its consent page, {public_url}/oauth/connect, which the
	// link a user is shown opens (see Connection).
	RedirectURI string
	ConnectURI  string
	// ClientName is how Manifold names itself when it registers.
	ClientName string
	// HTTP carries discovery, registration and token requests.
	HTTP *http.Client
	// Store keeps registrations, pending authorizations and tokens.
	Store  Store
	Logger *slog.Logger
	// Connected, if set, is told of each consent completed, with the
	// principal (as Principal names it) that now holds a grant.
	Connected func(principal string)
}

// ConsentRequired is the failure of a request whose caller has no token
// for the upstream (or not the scopes it needs): its user must open URL and
// consent. It is the caller's to be asked, never another's.
type ConsentRequired struct {
	Upstream string
	URL      string
}

func (e *ConsentRequired) Error() string {
	return "upstream " + e.Upstream + " needs the caller's authorization"
}

// Consent returns the URL the user must open and what to tell them.
func (e *ConsentRequired) Consent() (url, message string) {
	return e.URL, fmt.Sprintf("Manifold needs your permission to use %s on your behalf. Open the link, sign in and consent, then return here.", e.Upstream)
}

// ErrScopeRetries is a request the server refused for want of scope once
// more after the consents it already asked for.
var ErrScopeRetries = errors.New("the upstream asked for more scope again after repeated consent")

// maxStepUps bounds the consents asked for more scope since the server
// last accepted a request: with the first consent, three authorizations
// at most, where a server that will never be satisfied is given up on.
const maxStepUps = 2

// pendingTTL bounds how long an authorization waits for its callback.
const pendingTTL = 10 * time.Minute
