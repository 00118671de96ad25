package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/manifold-mcp/manifold/internal/loopback"
)

// OAuth modes.
const (
	OAuthUser              = "user"
	OAuthClientCredentials = "client_credentials"
	OAuthExchange          = "exchange"
	OAuthEnterprise        = "enterprise"
	OAuthWorkload          = "workload"
)

// validateOAuth checks each upstream's oauth and what it needs of the rest:
// mode user keys tokens by principal (so downstream authentication, or a
// loopback listener whose callers are one local principal) and sends
// browsers back to public_url (https outside loopback; on a loopback
// listener, the listener itself by default).
func (c *Config) validateOAuth(ps *problems) {
	users := false
	for i, u := range c.Upstreams {
		if u.OAuth == nil {
			continue
		}
		at := fmt.Sprintf("upstreams[%d].oauth", i)
		o := u.OAuth
		switch o.Mode {
		case OAuthUser:
			users = true
			if !c.Auth.Enabled() && !c.LoopbackListen() {
				ps.add(at+".mode", "user keeps a token per principal, so it needs downstream authentication (auth) unless listen is a loopback address (its callers are then one local principal)")
			}
			if u.ToolCache.Scope == "public" {
				ps.add(fmt.Sprintf("upstreams[%d].tool_cache.scope", i), "must be private with oauth mode user: the upstream answers each user as themselves, and a public entry would serve one user's results to everyone")
			}
		case OAuthClientCredentials:
			if o.ClientID == "" {
				ps.add(at+".client_id", "is required with mode client_credentials")
			} else if o.ClientSecret == "" && o.PrivateKeyFile == "" {
				ps.add(at+".client_secret", "client_credentials needs client_secret or private_key_file")
			}
		case OAuthExchange, OAuthEnterprise:
			c.validateOnBehalf(at, o, ps)
			if u.ToolCache.Scope == "public" {
				ps.add(fmt.Sprintf("upstreams[%d].tool_cache.scope", i), "must be private with oauth mode %s: the upstream answers each caller as themselves", o.Mode)
			}
		case OAuthWorkload:
			if o.AssertionFile == "" {
				ps.add(at+".assertion_file", "is required with mode workload: it holds the workload's JWT")
			}
		default:
			ps.add(at+".mode", "must be user, client_credentials, exchange, enterprise or workload, not %q", o.Mode)
		}
		validateBehalfKeys(at, o, ps)
		if u.IsStdio() {
			ps.add(at, "only an HTTP upstream can be an OAuth-protected resource")
		}
		if o.ClientSecret != "" && o.ClientID == "" {
			ps.add(at+".client_secret", "needs client_id")
		}
		if o.PrivateKeyFile != "" && o.ClientSecret != "" {
			ps.add(at+".private_key_file", "client_secret and private_key_file are exclusive")
		}
		if o.ClientMetadataURL != "" && !isHTTPSURL(o.ClientMetadataURL) {
			ps.add(at+".client_metadata_url", "must be an https URL with a path, not %q", o.ClientMetadataURL)
		}
		if slices.ContainsFunc(u.ForwardHeaders, func(h string) bool { return strings.EqualFold(h, "Authorization") }) {
			ps.add(fmt.Sprintf("upstreams[%d].forward_headers", i), "must not forward Authorization to an OAuth upstream: the caller's token is not for it")
		}
	}
	if users {
		c.validatePublicURL(ps)
	}
}

// validateOnBehalf checks modes exchange and enterprise: each exchanges
// the caller's own token, so callers must present one (a client
// certificate alone gives nothing to exchange), at a secure endpoint.
func (c *Config) validateOnBehalf(at string, o *OAuth, ps *problems) {
	if len(c.Auth.BearerTokens) == 0 && c.Auth.JWT.Issuer == "" {
		ps.add(at+".mode", "%s exchanges the caller's token, so it needs callers authenticated by token (auth.jwt or auth.bearer_tokens)", o.Mode)
	}
	if o.ClientID == "" {
		ps.add(at+".client_id", "is required with mode %s", o.Mode)
	}
	endpoint, key := o.TokenEndpoint, ".token_endpoint"
	if o.Mode == OAuthEnterprise {
		if o.IdP == nil || o.IdP.ClientID == "" {
			ps.add(at+".idp.client_id", "is required with mode enterprise: the ID token's audience at the identity provider")
		}
		endpoint, key = "", ".idp.token_endpoint"
		if o.IdP != nil {
			endpoint = o.IdP.TokenEndpoint
		}
	}
	if endpoint == "" {
		ps.add(at+key, "is required with mode %s", o.Mode)
	} else if p, err := url.Parse(endpoint); err != nil || p.Host == "" || !loopback.Secure(p) {
		ps.add(at+key, "must be an https URL (http only on loopback), not %q", endpoint)
	}
}

// validateBehalfKeys refuses the keys of one mode given to another, where
// they would be silently ignored.
func validateBehalfKeys(at string, o *OAuth, ps *problems) {
	if o.TokenEndpoint != "" && o.Mode != OAuthExchange {
		ps.add(at+".token_endpoint", "is for mode exchange only")
	}
	if o.Audience != "" && o.Mode != OAuthExchange {
		ps.add(at+".audience", "is for mode exchange only")
	}
	if o.IdP != nil && o.Mode != OAuthEnterprise {
		ps.add(at+".idp", "is for mode enterprise only")
	}
	if o.AssertionFile != "" && o.Mode != OAuthWorkload {
		ps.add(at+".assertion_file", "is for mode workload only")
	}
	if o.Mode == OAuthWorkload && o.PrivateKeyFile != "" {
		ps.add(at+".private_key_file", "mode workload authenticates with assertion_file")
	}
}

// validatePublicURL checks the base URL a user's browser comes back to.
func (c *Config) validatePublicURL(ps *problems) {
	if c.PublicURL == "" {
		if !c.LoopbackListen() {
			ps.add("public_url", "is required with an upstream of oauth mode user unless listen is a loopback address: the authorization server sends the user back to {public_url}/oauth/callback")
		}
		return
	}
	p, err := url.Parse(c.PublicURL)
	switch {
	case err != nil || p.Host == "" || (p.Scheme != "https" && p.Scheme != "http"):
		ps.add("public_url", "must be an absolute http(s) URL, not %q", c.PublicURL)
	case !loopback.Secure(p):
		ps.add("public_url", "must be https outside loopback: the callback carries authorization codes")
	case p.RawQuery != "" || p.Fragment != "":
		ps.add("public_url", "must have no query or fragment")
	}
}

func isHTTPSURL(s string) bool {
	p, err := url.Parse(s)
	return err == nil && p.Scheme == "https" && p.Host != "" && p.Path != "" && p.Path != "/"
}

// checkKeyFile reports an unreadable private_key_file.
func checkKeyFile(at, path string, ps *problems) {
	if path == "" {
		return
	}
	if _, err := os.ReadFile(path); err != nil {
		ps.add(at+".private_key_file", "%v", plain(err))
	}
}

// maxAssertionBytes bounds a workload JWT file.
const maxAssertionBytes = 16 << 10

// checkAssertionFile reports an unreadable or oversized assertion_file.
func checkAssertionFile(at, path string, ps *problems) {
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		ps.add(at+".assertion_file", "%v", plain(err))
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxAssertionBytes {
		ps.add(at+".assertion_file", "holds %d bytes; a workload JWT is at most %d", fi.Size(), maxAssertionBytes)
	}
}

// CallbackPath is where an authorization server sends a user back.
const CallbackPath = "/oauth/callback"

// CallbackURL is Manifold's OAuth redirect URI.
func (c *Config) CallbackURL() string { return c.BaseURL() + CallbackPath }

// BaseURL is where a user's browser reaches Manifold: public_url, else,
// on a loopback listen address, that address (RFC 8252's loopback
// redirect); "" when neither.
func (c *Config) BaseURL() string {
	switch {
	case c.PublicURL != "":
		return strings.TrimSuffix(c.PublicURL, "/")
	case !c.LoopbackListen():
		return ""
	case c.TLS.CertFile != "":
		return "https://" + c.Listen
	}
	return "http://" + c.Listen
}

// LoopbackListen reports whether listen is a loopback address, reached
// from this machine only.
func (c *Config) LoopbackListen() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	return err == nil && loopback.Host(host)
}

// ConnectPath is the page a consent link opens, which names whom the
// authorization is for before the user goes on to the authorization server.
const ConnectPath = "/oauth/connect"

// ConnectURL is the consent page's URL.
func (c *Config) ConnectURL() string { return c.BaseURL() + ConnectPath }

// StateDirectory is state_dir, else the user's state directory
// ($XDG_STATE_HOME/manifold, else ~/.local/state/manifold); "" when there
// is none.
func (c *Config) StateDirectory() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "manifold")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "manifold")
	}
	return ""
}
