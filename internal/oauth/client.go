package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/loopback"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// Client is the OAuth client of one upstream. It is safe for concurrent
// use, and its Transport carries the upstream's HTTP requests.
type Client struct {
	o      Options
	log    *slog.Logger
	sealer *seal.Sealer
	digest string // of the configuration: what it stored is its alone
	base   http.RoundTripper

	refresh singleflight.Group // one refresh (or client_credentials grant) per principal
	held    *held              // the grants this replica holds, in front of the store
	nonces  nonces             // the DPoP nonces servers gave

	mu       sync.Mutex
	flushing bool // flushSoon's loop runs
	closed   bool
	done     chan struct{} // closed by Close: flushSoon's loop ends
	flushes  sync.WaitGroup
	// stepUps counts, per principal, the consents asked for more scope
	// since its last request the server accepted.
	stepUps map[string]int
	// asked is, per principal, the consent it was last shown, shown again
	// to its requests while the pending authorization has time left: one
	// user's calls keep one pending, not one each.
	asked map[string]askedConsent
	// refreshFailure is the last refresh's failure, for Stats.
	refreshFailure  string
	refreshFailedAt time.Time
}

type askedConsent struct {
	scopes string // what it asks for, with the issuer
	url    string
	until  time.Time
}

// New returns the client of o.Upstream; secret seals what it stores (it
// must be the same on every replica that shares the store).
func New(o Options, secret []byte) *Client {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTP == nil {
		o.HTTP = http.DefaultClient
	}
	hc := *o.HTTP
	hc.CheckRedirect = checkRedirect
	o.HTTP = &hc
	if o.ClientName == "" {
		o.ClientName = "Manifold"
	}
	return &Client{o: o, log: o.Logger.With("upstream", o.Upstream), sealer: newSealer(secret), digest: configDigest(o),
		held: newHeld(), done: make(chan struct{}), stepUps: map[string]int{}, asked: map[string]askedConsent{}}
}

// maxRedirects bounds the redirects of a metadata fetch.
const maxRedirects = 5

// checkRedirect is the redirect policy of every request the client makes
// of an authorization server: a POST (registration, a token request,
// carrying codes, verifiers, secrets and refresh tokens) is never sent on,
// its redirect being the answer; a GET (metadata) follows a few redirects,
// each to a URL discovery itself would accept (https, or http on a
// loopback host).
func checkRedirect(req *http.Request, via []*http.Request) error {
	switch {
	case via[0].Method != http.MethodGet:
		return http.ErrUseLastResponse
	case len(via) >= maxRedirects:
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return secure("a redirect", req.URL.String())
}

// configDigest names a configuration: a reload that changes it leaves the
// tokens and registrations of the one before out of reach.
func configDigest(o Options) string {
	h := sha256.New()
	for _, s := range append([]string{o.Upstream, o.Resource, o.Mode, o.ClientID, o.ClientSecret, o.MetadataURL, portless(o.RedirectURI),
		o.TokenEndpoint, o.Audience, o.IdP.TokenEndpoint, o.IdP.ClientID, o.IdP.ClientSecret, o.AssertionFile}, o.Scopes...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if o.PrivateKey != nil {
		fmt.Fprintf(h, "%v", o.PrivateKey.Public())
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// portless is a loopback redirect URI without its port, which manifold
// stdio picks anew at each start (RFC 8252 §7.3: the authorization server
// accepts any port there): a restart keeps its grants and registrations.
func portless(redirect string) string {
	u, err := url.Parse(redirect)
	if err != nil || !loopback.Host(u.Hostname()) {
		return redirect
	}
	u.Host = u.Hostname()
	return u.String()
}

// principalOf names, in keys, whose tokens a request uses: the caller's
// principal (as a digest) in mode user, Manifold itself with client
// credentials.
func (c *Client) principalOf(ctx context.Context) (string, error) {
	if !c.PerPrincipal() {
		return "manifold", nil
	}
	p := Principal(ctx)
	if p == "" {
		return "", errors.New("oauth mode user needs an authenticated caller")
	}
	return p, nil
}

// As puts a caller on a context: what a client of mode user needs to act
// for that caller later, outside its request (to end a session it opened).
type As func(context.Context) context.Context

// CallerOf is the As of ctx's caller.
func CallerOf(ctx context.Context) As {
	p := auth.From(ctx)
	return func(c context.Context) context.Context { return auth.WithPrincipal(c, p) }
}

// Principal names ctx's caller in keys, as a digest ("" for none): whose
// tokens a client of mode user uses, and so whose sessions a server
// reached with them keeps apart.
func Principal(ctx context.Context) string {
	p := auth.From(ctx)
	if p == nil {
		return ""
	}
	return PrincipalKey(p.ID)
}

// PrincipalKey is Principal of the caller whose principal ID is id.
func PrincipalKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// save seals v (as JSON) for principal under key, at version: stored is
// false when the store holds a version at least as new.
func (c *Client) save(ctx context.Context, key, principal string, v any, version int64, ttl time.Duration) (stored bool, err error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	sealed, err := c.sealer.Seal(principal, key, b)
	if err != nil {
		return false, err
	}
	return c.o.Store.Put(ctx, key, Versioned{Value: sealed, Version: version}, ttl)
}

// load opens what save stored under key for principal.
func (c *Client) load(ctx context.Context, key, principal string, v any) error {
	rec, err := c.o.Store.Get(ctx, key)
	if err != nil {
		return err
	}
	return c.open(rec.Value, key, principal, v)
}

// take is load, once.
func (c *Client) take(ctx context.Context, key, principal string, v any) error {
	b, err := c.o.Store.Take(ctx, key)
	if err != nil {
		return err
	}
	return c.open(b, key, principal, v)
}

func (c *Client) open(sealed []byte, key, principal string, v any) error {
	b, err := c.sealer.Open(principal, key, sealed)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// grantKey is where principal's grant is stored.
func (c *Client) grantKey(principal string) string {
	return "tok:" + c.o.Upstream + ":" + c.digest + ":" + principal
}

// Close stops the client, for a reload that replaced or removed it, or a
// stop: the grants the store has not taken are tried once more (within
// ctx), its idle connections are closed, and what it holds is dropped.
func (c *Client) Close(ctx context.Context) {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
	c.flushes.Wait()
	if left := c.flush(ctx); left > 0 {
		c.log.Warn("oauth: the token store did not take every grant before the client closed; those users will be asked again", "grants", left)
	}
	c.held.takeOver(newHeld())      // dropped
	c.o.HTTP.CloseIdleConnections() // its connections go with what it held
}

// TakeOver makes c hold what old held, when old is a client of the same
// configuration (a reload replaced the upstream for another reason): its
// grants, those the store has not taken included, and the refresh tokens
// it knows spent. It reports whether it did; old is then Closed with
// nothing left to store.
func (c *Client) TakeOver(old *Client) bool {
	if old == nil || old.digest != c.digest {
		return false
	}
	c.held.takeOver(old.held)
	if len(c.held.toSave()) > 0 {
		c.flushSoon()
	}
	return true
}

// stepUp counts a consent for more scope; it reports false past the bound.
func (c *Client) stepUp(principal string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stepUps) >= maxGrantsInMemory {
		c.stepUps = map[string]int{}
	}
	c.stepUps[principal]++
	return c.stepUps[principal] <= maxStepUps
}

func (c *Client) accepted(principal string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.stepUps, principal)
}

// union is a and b without repeats, in order.
func union(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
