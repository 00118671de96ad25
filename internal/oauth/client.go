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
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/manifold-mcp/manifold/internal/auth"
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

	mu     sync.Mutex
	grants map[string]*grant // principal → its grant, in front of the store
	// stepUps counts, per principal, the consents asked for more scope
	// since its last request the server accepted.
	stepUps map[string]int
	// asked is, per principal, the consent it was last shown, shown again
	// to its requests while the pending authorization has time left: one
	// user's calls keep one pending, not one each.
	asked map[string]askedConsent
}

type askedConsent struct {
	scopes string // what it asks for, with the issuer
	url    string
	until  time.Time
}

// maxGrantsInMemory bounds the grants a replica keeps in front of the
// store; past it, the map starts again (the store still has them).
const maxGrantsInMemory = 100_000

// New returns the client of o.Upstream; secret seals what it stores (it
// must be the same on every replica that shares the store).
func New(o Options, secret []byte) *Client {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTP == nil {
		o.HTTP = http.DefaultClient
	}
	if o.ClientName == "" {
		o.ClientName = "Manifold"
	}
	return &Client{o: o, log: o.Logger.With("upstream", o.Upstream), sealer: newSealer(secret), digest: configDigest(o),
		grants: map[string]*grant{}, stepUps: map[string]int{}, asked: map[string]askedConsent{}}
}

// configDigest names a configuration: a reload that changes it leaves the
// tokens and registrations of the one before out of reach.
func configDigest(o Options) string {
	h := sha256.New()
	for _, s := range append([]string{o.Upstream, o.Resource, o.Mode, o.ClientID, o.ClientSecret, o.MetadataURL, o.RedirectURI}, o.Scopes...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if o.PrivateKey != nil {
		fmt.Fprintf(h, "%v", o.PrivateKey.Public())
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// principalOf names, in keys, whose tokens a request uses: the caller's
// principal (as a digest) in mode user, Manifold itself with client
// credentials.
func (c *Client) principalOf(ctx context.Context) (string, error) {
	if c.o.Mode == ModeClientCredentials {
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
	sum := sha256.Sum256([]byte(p.ID))
	return hex.EncodeToString(sum[:16])
}

// save seals v (as JSON) for principal under key.
func (c *Client) save(ctx context.Context, key, principal string, v any, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	sealed, err := c.sealer.Seal(principal, key, b)
	if err != nil {
		return err
	}
	return c.o.Store.Set(ctx, key, sealed, ttl)
}

// load opens what save stored under key for principal.
func (c *Client) load(ctx context.Context, key, principal string, v any) error {
	b, err := c.o.Store.Get(ctx, key)
	if err != nil {
		return err
	}
	return c.open(b, key, principal, v)
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

// Forget drops every token this replica holds in memory (the store's
// expire on their own) and closes its idle connections: for a reload that
// replaced or removed the client, or a stop.
func (c *Client) Forget() {
	c.mu.Lock()
	c.grants = map[string]*grant{}
	c.mu.Unlock()
	c.o.HTTP.CloseIdleConnections() // its connections go with what it held
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
