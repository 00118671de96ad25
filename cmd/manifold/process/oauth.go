package process

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"html"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/breaker"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/internal/outage"
	"github.com/manifold-mcp/manifold/internal/ratelimit"
	"github.com/manifold-mcp/manifold/router/hub"
	"github.com/manifold-mcp/manifold/upstream"
)

// oauthClients make the OAuth clients of the upstreams that have one (each
// client then lives in the set of upstreams, Options.OAuth), and hold what
// they share: the store (Redis when the cache has
// it, so that a callback reaching any replica finds its authorization, and
// every replica the tokens) and the secret that seals what it holds.
type oauthClients struct {
	// base is where a user's browser reaches this process: its callback
	// is base/oauth/callback, its consent page base/oauth/connect ("": it
	// serves neither).
	base   string
	store  oauth.Store
	rdb    redis.UniversalClient // the store's, when it is Redis
	secret []byte
	log    *slog.Logger

	// pages limits, per client address, the requests of the pages a
	// browser opens, which anyone may; callbacks and connects summarize
	// their refusals (internal/outage), a flood's in a few lines.
	pages               *ratelimit.Limiter
	callbacks, connects *outage.Summary

	// clientOf is the OAuth client of the upstream called name in the
	// current set, nil if none (the process sets it with the registry).
	clientOf func(name string) *oauth.Client

	// connected is told of each consent completed (the process sets it
	// before it serves: the hub tells the principal's streams).
	connected func(upstream, principal string)

	// replicas carries the consents completed between the replicas that
	// share the store's Redis (nil without one): a user's browser comes
	// back to whichever replica public_url reaches, while the caller's
	// streams may be open on any.
	replicas *consentBus
}

// pageLimit is the limit of each client address on the callback and the
// consent page together: a consent takes three requests.
var pageLimit = ratelimit.Limit{Rate: 1, Burst: 20}

func newOAuthClients(cfg *config.Config, base string, log *slog.Logger) (*oauthClients, error) {
	o := &oauthClients{base: base, store: oauth.NewMemoryStore(), secret: oauthSecret(cfg), log: log,
		pages:     ratelimit.New("oauth page", pageLimit, ratelimit.Shared{}),
		callbacks: &outage.Summary{Log: log, Subject: "oauth callback"},
		connects:  &outage.Summary{Log: log, Subject: "oauth consent page"}}
	co, err := cacheOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	if r := co.Redis; r != nil {
		// A bounded wait and a breaker, as the cache has: with Redis hung,
		// a request costs what memory holds, not a timeout each time.
		brk := breaker.New(r.BreakerFailures, r.BreakerCooldown, func(open bool) {
			if open {
				log.Warn("oauth: the token store (Redis) is unavailable; grants held in memory serve until it recovers")
			} else {
				log.Info("oauth: the token store (Redis) recovered")
			}
		})
		timeout := max(r.Timeout, 500*time.Millisecond)
		o.store, o.rdb = oauth.NewRedisStore(r.Client, r.Prefix+"oauth:", timeout, brk)
		o.replicas = newConsentBus(o.rdb, r.Client, r.Prefix+"oauth:connected", timeout, log)
		return o, nil
	}
	if dir := cfg.StateDirectory(); dir != "" && hasOAuth(cfg) {
		o.keepIn(cfg, dir)
	}
	return o, nil
}

// tellHub is the connected of a process: the hub tells the streams of
// the principal that consented that the upstream's lists changed.
func tellHub(h *hub.Hub) func(upstream, principal string) {
	return func(upstream, principal string) {
		h.Connected(upstream, func(id string) bool { return oauth.PrincipalKey(id) == principal })
	}
}

// uiOf is what /ui shows of an upstream's OAuth client, nil if it has none.
func uiOf(client *oauth.Client) *uiOAuth {
	if client == nil {
		return nil
	}
	st := client.Stats()
	o := &uiOAuth{Grants: st.Grants, Pending: st.Pending, LastRefreshFailure: st.RefreshFailure}
	if !st.RefreshFailedAt.IsZero() {
		o.LastRefreshAt = st.RefreshFailedAt.UTC().Format(time.RFC3339)
	}
	return o
}

// hasOAuth reports whether an upstream has an OAuth client.
func hasOAuth(cfg *config.Config) bool {
	return slices.ContainsFunc(cfg.Upstreams, func(u config.Upstream) bool { return u.OAuth != nil })
}

// keepIn makes a Manifold without Redis keep its grants and registrations
// in a sealed file of dir, sealed with cache.secret's derivation or a
// secret kept beside it; without either, in memory as before (logged).
func (c *oauthClients) keepIn(cfg *config.Config, dir string) {
	store, err := oauth.NewFileStore(dir)
	if err == nil && cfg.Cache.Secret == "" {
		c.secret, err = oauth.StateSecret(dir)
	}
	if err != nil {
		c.log.Warn("oauth: grants are kept in memory only; a restart asks every user again", "err", err)
		c.secret = oauthSecret(cfg)
		return
	}
	c.store = store
}

// closeTimeout bounds how long a closing client may try to store the
// grants its store has not taken.
const closeTimeout = 2 * time.Second

// consented tells the hub of a consent completed on this replica, and
// the other replicas, whose hubs tell the principal's streams open there.
func (c *oauthClients) consented(upstream, principal string) {
	if c.connected != nil {
		c.connected(upstream, principal)
	}
	if c.replicas != nil {
		c.replicas.publish(upstream, principal)
	}
}

// listenReplicas tells the hub (connected) of the consents completed on
// the other replicas, until close.
func (c *oauthClients) listenReplicas() {
	if c.replicas != nil && c.connected != nil {
		c.replicas.listen(c.connected)
	}
}

// close closes the store's Redis client; the clients closed with their
// upstreams before (closeAll).
func (c *oauthClients) close() error {
	if c.replicas != nil {
		c.replicas.stop()
	}
	if c.rdb != nil {
		return c.rdb.Close()
	}
	return nil
}

// oauthSecret seals the clients' store: derived from cache.secret, which
// replicas sharing Redis share; random (this process only) without one.
func oauthSecret(cfg *config.Config) []byte {
	if cfg.Cache.Secret == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return b
	}
	m := hmac.New(sha256.New, []byte(cfg.Cache.Secret))
	m.Write([]byte("manifold oauth secret"))
	return m.Sum(nil)
}

// wire makes o's upstream an OAuth client's: its requests go through a
// new client, kept in o (and so in the set the upstream goes into), and
// (mode user) per principal.
func (c *oauthClients) wire(uc config.Upstream, o *upstream.Options) error {
	if uc.OAuth == nil {
		return nil
	}
	key, err := privateKey(uc.OAuth.PrivateKeyFile)
	if err != nil {
		return fmt.Errorf("oauth.private_key_file: %w", err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: o.TLS, Proxy: http.ProxyFromEnvironment}}
	client := oauth.New(oauth.Options{
		Upstream: uc.Name, Resource: uc.URL, Mode: uc.OAuth.Mode,
		ClientID: uc.OAuth.ClientID, ClientSecret: uc.OAuth.ClientSecret, PrivateKey: key,
		MetadataURL: uc.OAuth.ClientMetadataURL, Scopes: uc.OAuth.Scopes,
		RedirectURI: c.base + config.CallbackPath, ConnectURI: c.base + config.ConnectPath, HTTP: hc, Store: c.store, Logger: c.log,
		Connected:     func(principal string) { c.consented(uc.Name, principal) },
		TokenEndpoint: uc.OAuth.TokenEndpoint, Audience: uc.OAuth.Audience, IdP: idpOf(uc.OAuth), AssertionFile: uc.OAuth.AssertionFile,
	}, c.secret)
	o.Authorize, o.OAuth = client.Transport, client
	if client.PerPrincipal() {
		o.PerPrincipal, o.KeyByPrincipal = true, true
	}
	return nil
}

// idpOf is the identity provider of mode enterprise.
func idpOf(o *config.OAuth) oauth.IdP {
	if o.IdP == nil {
		return oauth.IdP{}
	}
	return oauth.IdP{TokenEndpoint: o.IdP.TokenEndpoint, ClientID: o.IdP.ClientID, ClientSecret: o.IdP.ClientSecret}
}

// closeClient closes a replaced or removed client, within closeTimeout.
func closeClient(old *oauth.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	old.Close(ctx)
}

// privateKey reads a PEM private key (PKCS #8, PKCS #1 or SEC 1).
func privateKey(path string) (crypto.Signer, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("not a PKCS #8, PKCS #1 or EC private key")
}

// callback is {public_url}/oauth/callback, where an authorization server
// sends the user back: it carries no caller credential, so the pending
// authorization is found by its state alone (and spent, whatever happens),
// and the user is shown a short page.
func (c *oauthClients) callback(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	q := r.URL.Query()
	name, ok := oauth.PendingUpstream(ctx, c.store, c.secret, q.Get("state"))
	client := c.clientOf(name)
	err := oauth.ErrUnknownState
	if ok && client != nil {
		err = client.Callback(ctx, q)
	}
	if err != nil {
		c.callbacks.Failure(err, "upstream", name)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, page, "Authorization failed", "This authorization could not be completed (it may have expired, been used already, or been refused). Ask your agent to try again.")
		return
	}
	c.callbacks.Success()
	fmt.Fprintf(w, page, "Authorized", fmt.Sprintf("Manifold may now use %s on your behalf. You can close this page and return to your agent.", html.EscapeString(name)))
}

// connect is {public_url}/oauth/connect, the page a consent link opens. It
// names the upstream and the principal the authorization is for, so that a
// user forwarded another's link sees it is not theirs (whoever completes
// it gives that principal their account), and goes on to the
// authorization server only on a click: its form POSTs here, answered 303
// there. A GET (a prefetch, a link preview) starts nothing, and a POST
// from another site (a form that would skip the page) is refused.
func (c *oauthClients) connect(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	state := r.URL.Query().Get("state")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPost:
		if err := sameSite.Check(r); err != nil {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, page, "Not from this page", "Open the link your agent gave you, and continue from there.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxConnectForm)
		if err := r.ParseForm(); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, page, "Bad request", "The form could not be read.")
			return
		}
		state = r.PostForm.Get("state")
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	conn, err := c.connection(ctx, state)
	if err != nil {
		c.connects.Failure(err)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, page, "Link expired", "This link has expired or was used already. Ask your agent again: it will give you a new one.")
		return
	}
	c.connects.Success()
	if r.Method == http.MethodPost {
		http.Redirect(w, r, conn.URL, http.StatusSeeOther)
		return
	}
	_ = connectPage.Execute(w, struct {
		*oauth.Connection
		State string
	}{conn, state})
}

// limited is h, one of the pages a browser opens, behind pageLimit per
// client address: one address's flood is answered 429 (and summarized
// with h's refusals), and every other's requests are served still.
func (c *oauthClients) limited(h http.HandlerFunc, refusals *outage.Summary) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, after := c.pages.Allow(r.Context(), addressOf(r))
		if ok {
			h(w, r)
			return
		}
		refusals.Failure(errTooMany, "retryAfter", after.Round(time.Millisecond))
		pageHeaders(w)
		w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(after)))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, page, "Too many requests", "Too many requests from your address. Wait a minute, then try again.")
	})
}

var errTooMany = errors.New("too many requests from one address")

// addressOf keys a client in pageLimit: its IP address, or an IPv6
// address's /64, which one host may hold whole.
func addressOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Unmap().Is4() {
		return host
	}
	prefix, _ := ip.Prefix(64)
	return prefix.String()
}

// connection is the pending authorization state names, from the client of
// its upstream.
func (c *oauthClients) connection(ctx context.Context, state string) (*oauth.Connection, error) {
	name, ok := oauth.PendingUpstream(ctx, c.store, c.secret, state)
	client := c.clientOf(name)
	if !ok || client == nil {
		return nil, oauth.ErrUnknownState
	}
	return client.Connection(ctx, state)
}

// sameSite refuses a POST a browser says came from another origin.
var sameSite = http.NewCrossOriginProtection()

// maxConnectForm bounds the consent page's form: a state.
const maxConnectForm = 4 << 10

// pageHeaders are those of the pages a user's browser is shown: never
// cached, referred from or framed, and running nothing.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
}

var connectPage = template.Must(template.New("connect").Parse(`<!doctype html><html lang="en"><head><meta charset="utf-8">` +
	`<meta name="viewport" content="width=device-width"><title>Connect {{.Upstream}} – Manifold</title></head>` +
	`<body style="font-family:sans-serif;max-width:36em;margin:3em auto"><h1>Connect {{.Upstream}} for {{.For}}</h1>` +
	`<p>An agent signed in to Manifold as <strong>{{.For}}</strong> asks to use <strong>{{.Upstream}}</strong> on that account's behalf. ` +
	`Continue, and you sign in at {{.Server}}: the account you consent with there is the one {{.For}}'s agent will use.</p>` +
	`<p>If you are not {{.For}}, or did not just ask your agent for this, close this page: this link is someone else's.</p>` +
	`<form method="post"><input type="hidden" name="state" value="{{.State}}">` +
	`<button type="submit" style="font-size:1em;padding:.5em 1em">Continue to {{.Server}}</button></form></body></html>`))

const page = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>Manifold</title></head>` +
	`<body style="font-family:sans-serif;max-width:36em;margin:3em auto"><h1>%s</h1><p>%s</p></body></html>`
