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
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/breaker"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/upstream"
)

// oauthClients are the OAuth clients of the upstreams that have one, by
// upstream name, and what they share: the store (Redis when the cache has
// it, so that a callback reaching any replica finds its authorization, and
// every replica the tokens) and the secret that seals what it holds.
type oauthClients struct {
	store  oauth.Store
	rdb    redis.UniversalClient // the store's, when it is Redis
	secret []byte
	log    *slog.Logger

	mu      sync.Mutex
	clients map[string]*oauth.Client
}

func newOAuthClients(cfg *config.Config, log *slog.Logger) (*oauthClients, error) {
	o := &oauthClients{store: oauth.NewMemoryStore(), secret: oauthSecret(cfg), log: log, clients: map[string]*oauth.Client{}}
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
		o.store, o.rdb = oauth.NewRedisStore(r.Client, r.Prefix+"oauth:", max(r.Timeout, 500*time.Millisecond), brk)
	}
	return o, nil
}

// closeTimeout bounds how long a closing client may try to store the
// grants its store has not taken.
const closeTimeout = 2 * time.Second

// close closes every client and the store's Redis client.
func (c *oauthClients) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for name, old := range c.clients {
		old.Close(ctx)
		delete(c.clients, name)
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

// wire makes o's upstream an OAuth client's: its requests go through the
// client, and (mode user) per principal.
func (c *oauthClients) wire(cfg *config.Config, uc config.Upstream, o *upstream.Options) error {
	if uc.OAuth == nil {
		c.forget(uc.Name)
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
		RedirectURI: cfg.CallbackURL(), HTTP: hc, Store: c.store, Logger: c.log,
	}, c.secret)
	o.Authorize = client.Transport
	if uc.OAuth.Mode == config.OAuthUser {
		o.PerPrincipal, o.KeyByPrincipal = true, true
	}
	c.mu.Lock()
	old := c.clients[uc.Name]
	c.clients[uc.Name] = client
	c.mu.Unlock()
	if old != nil {
		// The same OAuth configuration keeps its grants, those the store
		// has not taken yet included; another one starts afresh.
		client.TakeOver(old)
		closeClient(old)
	}
	return nil
}

// closeClient closes a replaced or removed client, within closeTimeout.
func closeClient(old *oauth.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	old.Close(ctx)
}

// forget drops the client of an upstream that no longer has one.
func (c *oauthClients) forget(name string) {
	c.mu.Lock()
	old := c.clients[name]
	delete(c.clients, name)
	c.mu.Unlock()
	if old != nil {
		closeClient(old)
	}
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
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	q := r.URL.Query()
	name, ok := oauth.PendingUpstream(ctx, c.store, c.secret, q.Get("state"))
	c.mu.Lock()
	client := c.clients[name]
	c.mu.Unlock()
	err := oauth.ErrUnknownState
	if ok && client != nil {
		err = client.Callback(ctx, q)
	}
	if err != nil {
		c.log.Info("oauth callback refused", "upstream", name, "err", err)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, page, "Authorization failed", "This authorization could not be completed (it may have expired, been used already, or been refused). Ask your agent to try again.")
		return
	}
	fmt.Fprintf(w, page, "Authorized", fmt.Sprintf("Manifold may now use %s on your behalf. You can close this page and return to your agent.", html.EscapeString(name)))
}

const page = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>Manifold</title></head>` +
	`<body style="font-family:sans-serif;max-width:36em;margin:3em auto"><h1>%s</h1><p>%s</p></body></html>`
