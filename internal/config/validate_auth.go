package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/loopback"
)

// validate checks the static tokens, the JWT settings and the metadata.
func (a *Auth) validate(ps *problems) {
	for i, tok := range a.BearerTokens {
		path := fmt.Sprintf("auth.bearer_tokens[%d]", i)
		if strings.HasPrefix(tok, auth.HashPrefix) {
			if _, err := auth.TokenDigest(tok); err != nil {
				ps.add(path, "%v", err)
			}
		} else if len(tok) < 16 {
			ps.add(path, "must be at least 16 characters")
		}
	}
	switch a.PrincipalFrom {
	case "", PrincipalFromClientCert:
	default:
		ps.add("auth.principal_from", "must be client_cert or empty, not %q", a.PrincipalFrom)
	}
	j := a.JWT
	if j.Issuer == "" {
		if len(j.Audiences) > 0 || j.JWKSURL != "" || j.JWKSFile != "" || len(a.PrincipalClaims) > 0 {
			ps.add("auth.jwt.issuer", "is required when auth.jwt or auth.principal_claims is set")
		}
	} else {
		if len(j.Audiences) == 0 {
			ps.add("auth.jwt.audiences", "must name at least one audience")
		}
		if (j.JWKSURL == "") == (j.JWKSFile == "") {
			ps.add("auth.jwt", "needs exactly one of jwks_url and jwks_file")
		}
		if j.JWKSURL != "" {
			checkSecureURL(ps, "auth.jwt.jwks_url", j.JWKSURL)
		}
	}
	if j.Leeway < 0 || j.Leeway > 5*time.Minute {
		ps.add("auth.jwt.leeway", "must be between 0 and 5m")
	}
	if a.Resource != "" {
		checkSecureURL(ps, "auth.resource", a.Resource)
	}
	for i, s := range a.AuthorizationServers {
		checkSecureURL(ps, fmt.Sprintf("auth.authorization_servers[%d]", i), s)
	}
	a.validateMetadataServers(ps)
}

// validateMetadataServers wants the protected resource metadata to name an
// authorization server, as the MCP authorization spec does, wherever
// callers present tokens an authorization server issues: the JWT issuer
// stands in only if it is a URL. Static tokens alone are API keys no
// server issues: no metadata is published for them (auth.Resource). Client
// certificates need no token.
func (a *Auth) validateMetadataServers(ps *problems) {
	if len(a.AuthorizationServers) > 0 || a.JWT.Issuer == "" || a.PrincipalFrom == PrincipalFromClientCert {
		return
	}
	if secureURLProblem(a.JWT.Issuer) != "" {
		ps.add("auth.authorization_servers", "must name at least one authorization server: the protected resource metadata tells MCP clients where to get a token (it would be auth.jwt.issuer, but %q is not an https URL)", a.JWT.Issuer)
	}
}

// checkSecureURL wants an absolute https URL, or http on a loopback host.
func checkSecureURL(ps *problems, path, raw string) {
	if msg := secureURLProblem(raw); msg != "" {
		ps.add(path, "%s", msg)
	}
}

// secureURLProblem is what checkSecureURL says of raw ("" when nothing).
func secureURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return "must be an absolute URL"
	case !loopback.Secure(u):
		return "must be https (http only on a loopback host)"
	}
	return ""
}

// validateTLS checks the listeners' TLS files go together.
func (c *Config) validateTLS(ps *problems) {
	t := c.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		ps.add("tls", "cert_file and key_file go together")
	}
	if t.ClientCAFile != "" && t.CertFile == "" {
		ps.add("tls.client_ca_file", "needs cert_file and key_file")
	}
	if c.Auth.PrincipalFrom == PrincipalFromClientCert && t.ClientCAFile == "" {
		ps.add("auth.principal_from", "client_cert needs tls.client_ca_file (mutual TLS)")
	}
}
