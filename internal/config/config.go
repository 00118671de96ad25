// Package config decodes Manifold's one YAML file into typed structs and
// validates it once, at load.
//
// Loading runs in three passes over the YAML tree: `${VAR}` references in
// scalar values are expanded from the environment, every mapping key is
// checked against the struct it decodes into (an unknown key is an error, not
// a silent no-op), and the decoded values are validated. Every problem found is
// reported with the YAML path of the offending key, all at once, so an
// operator fixes a file in one round. Code downstream of Load trusts the
// result and never re-checks it.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole file.
type Config struct {
	// Listen is the address of the downstream endpoint (POST /mcp).
	Listen string `yaml:"listen"`
	// PublicURL is Manifold's external base URL, as its users' browsers
	// reach it: its OAuth callback is PublicURL + /oauth/callback.
	PublicURL string `yaml:"public_url"`
	// LocalPrincipal names the one principal of a Manifold whose callers
	// are one user (manifold stdio; a loopback listener without auth),
	// which upstreams of oauth mode user need. Default: the OS user's name.
	LocalPrincipal string `yaml:"local_principal"`
	// StateDir keeps, without cache.redis, the OAuth clients' grants and
	// registrations (sealed) across restarts. Default: the user's state
	// directory ($XDG_STATE_HOME/manifold, else ~/.local/state/manifold).
	StateDir string `yaml:"state_dir"`
	// Namespace is "prefix" (URIs become upstream+uri) or "none".
	Namespace string `yaml:"namespace"`
	// AllowedOrigins are Origin values accepted besides loopback ones.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// AllowedHosts are Host values accepted besides loopback ones.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// MaxRequestBytes bounds a downstream request body.
	MaxRequestBytes ByteSize `yaml:"max_request_bytes"`
	// ReadTimeout bounds reading a request, headers and body: a client that
	// dribbles its body is cut off.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// ShutdownTimeout bounds the drain on SIGINT/SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// CursorSecret signs pagination cursors; replicas behind one load
	// balancer must share it. Empty means a random per-process secret.
	CursorSecret string `yaml:"cursor_secret"`
	// CursorTTL is how long a pagination cursor stays valid.
	CursorTTL time.Duration `yaml:"cursor_ttl"`
	Log       Log           `yaml:"log"`
	Admin     Admin         `yaml:"admin"`
	Auth      Auth          `yaml:"auth"`
	// TLS serves the listeners (listen and admin.listen) over TLS.
	TLS   ListenerTLS `yaml:"tls"`
	Cache Cache       `yaml:"cache"`
	// Subscriptions configures subscriptions/listen streams.
	Subscriptions Subscriptions `yaml:"subscriptions"`
	// Sessions bounds the sessions of legacy callers.
	Sessions Sessions `yaml:"sessions"`
	// Audit writes one line per request.
	Audit Audit `yaml:"audit"`
	// Limits bounds request rates.
	Limits Limits `yaml:"limits"`
	// Health configures how upstreams' health is followed.
	Health    Health     `yaml:"health"`
	Upstreams []Upstream `yaml:"upstreams"`
	// Endpoints are curated MCP endpoints beside /mcp, each serving a view
	// of the upstreams.
	Endpoints []Endpoint `yaml:"endpoints"`

	// File is the path Load read, for a reload to read again; "" when the
	// config came from Parse.
	File string `yaml:"-"`
	// Flags are what the command line set over the file, for a reload to
	// set again.
	Flags Flags `yaml:"-"`
}

// Flags are the settings a command line gives over the file's.
type Flags struct {
	// Listen, when set, replaces listen (manifold serve --listen).
	Listen string
}

// Admin is the operators' listener. When Listen is set, the operational
// endpoints (/healthz, /readyz, /metrics, /ui, /reload, /debug/pprof/)
// are served there, without authentication, and not on the main listener;
// otherwise all but /reload and pprof stay on the main listener.
type Admin struct {
	Listen string `yaml:"listen"`
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin listener.
	Pprof bool `yaml:"pprof"`
	// Operators are the principals (any rule matching, as upstreams[].access)
	// to whom the main listener's operational endpoints name every
	// upstream; to other callers they name only those their access rules
	// show them.
	Operators []AccessRule `yaml:"operators"`
}

// Subscriptions bounds the downstream subscription streams: what one
// listen may name, and the memory all of them may hold.
type Subscriptions struct {
	// KeepAlive is the interval of SSE comments on a quiet stream.
	KeepAlive time.Duration `yaml:"keepalive"`
	// MaxURIsPerStream bounds the resources one listen names; an upstream
	// is asked to watch at most WatchedStreams times as many.
	MaxURIsPerStream int `yaml:"max_uris_per_stream"`
	// MaxBytes bounds the memory all open streams may hold together (and
	// so how many may be open), what they name and what may queue for
	// them; past it a listen is refused.
	MaxBytes ByteSize `yaml:"max_bytes"`
}

// MaxWatched is how many resources one upstream is asked to watch at most.
func (s Subscriptions) MaxWatched() int { return WatchedStreams * s.MaxURIsPerStream }

// Health is how Manifold follows its upstreams' health.
type Health struct {
	// ProbeInterval is how often an upstream that is down is asked
	// whether it is back, traffic or not: readiness follows its return
	// within this long. One reached per principal (oauth mode user) is
	// asked this often, up or down.
	ProbeInterval time.Duration `yaml:"probe_interval"`
}

// Audit is the audit log, JSON lines: File is a path, "stderr", or empty
// (off).
type Audit struct {
	File string `yaml:"file"`
}

// Limits are rate limits, shared by the replicas through cache.redis when
// it is set. A rate of 0 turns a limit off.
type Limits struct {
	// PerPrincipal bounds each caller (its principal, or its address
	// without authentication), cache hits included.
	PerPrincipal RateLimit `yaml:"per_principal"`
	// PerUpstream bounds what is served from each upstream, cache hits
	// included.
	PerUpstream RateLimit `yaml:"per_upstream"`
}

// RateLimit is a token bucket: Rate requests a second, Burst above it.
type RateLimit struct {
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
}

// Sessions configures the sessions legacy callers open with initialize.
type Sessions struct {
	// IdleTimeout ends a session unused for this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// Max bounds the open sessions (of this process, or in Redis).
	Max int `yaml:"max"`
	// MaxPerPrincipal bounds the open sessions of one principal, so that
	// one caller cannot take them all (without authentication there is no
	// principal, and Max alone applies). The default is a tenth of Max, at
	// most 100.
	MaxPerPrincipal int `yaml:"max_per_principal"`
}

// Auth makes Manifold authenticate its callers itself. With neither
// tokens nor JWT, every caller is admitted and upstreams judge the
// credentials forwarded to them.
type Auth struct {
	// BearerTokens are accepted static `Authorization: Bearer` tokens, each
	// the token itself or "sha256:<hex>" of it.
	BearerTokens []string `yaml:"bearer_tokens"`
	// JWT accepts tokens signed by an identity provider.
	JWT JWT `yaml:"jwt"`
	// PrincipalClaims name, with iss and sub, who a JWT's caller is.
	PrincipalClaims []string `yaml:"principal_claims"`
	// Resource is the endpoint's canonical URL in the protected resource
	// metadata; empty derives it from each request's Host.
	// PrincipalFrom: "client_cert" names callers by their TLS client
	// certificate (needs tls.client_ca_file); empty, by their token.
	PrincipalFrom        string   `yaml:"principal_from"`
	Resource             string   `yaml:"resource"`
	AuthorizationServers []string `yaml:"authorization_servers"`
	ScopesSupported      []string `yaml:"scopes_supported"`
}

// AccessRule admits a principal whose claim Claim has one of Values.
type AccessRule struct {
	Claim  string   `yaml:"claim"`
	Values []string `yaml:"values"`
}

// JWT configures JWT validation; it is on when Issuer is set.
type JWT struct {
	Issuer    string   `yaml:"issuer"`
	Audiences []string `yaml:"audiences"`
	JWKSURL   string   `yaml:"jwks_url"`
	JWKSFile  string   `yaml:"jwks_file"`
	// Leeway tolerates clock skew on exp and nbf.
	Leeway time.Duration `yaml:"leeway"`
}

// MetadataServers are the authorization servers the protected resource
// metadata names: authorization_servers, or else the JWT issuer, the one
// server whose tokens are accepted. The MCP authorization spec wants at
// least one; with static tokens alone there is none, and no metadata.
func (a Auth) MetadataServers() []string {
	if len(a.AuthorizationServers) > 0 || a.JWT.Issuer == "" {
		return a.AuthorizationServers
	}
	return []string{a.JWT.Issuer}
}

// Enabled reports whether callers must authenticate.
func (a Auth) Enabled() bool {
	return len(a.BearerTokens) > 0 || a.JWT.Issuer != "" || a.PrincipalFrom == PrincipalFromClientCert
}

// PrincipalFromClientCert is auth.principal_from's one value.
const PrincipalFromClientCert = "client_cert"

// ListenerTLS is the listeners' certificate (reloaded when its files
// change) and, with ClientCAFile, mutual TLS.
type ListenerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// Cache configures the two-tier response cache.
type Cache struct {
	Memory Memory `yaml:"memory"`
	// Redis, when it has an address, is the tier shared by every replica.
	Redis Redis `yaml:"redis"`
	// Secret keys the credential fingerprints of private entries, and seals
	// them in Redis (always: a key per caller derived from it). Required
	// with Redis, so replicas agree; otherwise random per process.
	Secret string `yaml:"secret"`
	// CredentialHeaders are the request headers that make up a caller's
	// authorization context.
	CredentialHeaders []string `yaml:"credential_headers"`
	// MaxEntryBytes bounds one cached result; larger ones are not cached.
	MaxEntryBytes ByteSize `yaml:"max_entry_bytes"`
	// MaxTTL caps the lifetime an upstream's ttlMs can give an entry.
	MaxTTL time.Duration `yaml:"max_ttl"`
	// StaleIfError is how long past its freshness an entry may still be
	// served, with ttlMs 0, when the upstream cannot be reached.
	StaleIfError *time.Duration `yaml:"stale_if_error"`
	// RefreshAhead says which entries a read in the last tenth of their
	// freshness refreshes in the background: public (default), all, off.
	RefreshAhead string `yaml:"refresh_ahead"`
}

// Memory is the in-process tier.
type Memory struct {
	// MaxBytes bounds the tier; 0 turns it off.
	MaxBytes *ByteSize `yaml:"max_bytes"`
}

// Redis is the shared tier.
type Redis struct {
	// URL is redis:// or rediss:// (standalone). Addrs with MasterName is
	// Sentinel; Addrs alone with several entries is Cluster.
	URL        string   `yaml:"url"`
	Addrs      []string `yaml:"addrs"`
	MasterName string   `yaml:"master_name"`
	Username   string   `yaml:"username"`
	Password   string   `yaml:"password"`
	DB         int      `yaml:"db"`
	// Prefix starts every key and the invalidation channel.
	Prefix string `yaml:"prefix"`
	// Timeout bounds each Redis command; a cache must cost little more
	// than a miss when Redis is slow.
	Timeout time.Duration `yaml:"timeout"`
}

// Enabled reports whether a Redis tier is configured.
func (r *Redis) Enabled() bool { return r.URL != "" || len(r.Addrs) > 0 }

// Log configures log/slog output.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // text | json
}

// Upstream is one MCP server behind Manifold, reached over HTTP (URL) or
// stdio (Command).
type Upstream struct {
	Name string `yaml:"name"`
	// Description is what a caller who has not authorized an OAuth
	// upstream (mode user) is told of it, on its connect tool.
	Description string `yaml:"description"`
	// Required upstreams must be ready for /readyz to say ready.
	Required bool `yaml:"required"`

	URL string `yaml:"url"`
	// Transport is how url is spoken to: auto (Streamable HTTP, falling
	// back to the 2024-11-05 HTTP+SSE transport on 404/405), http, sse;
	// stdio for command.
	Transport      string            `yaml:"transport"`
	Headers        map[string]string `yaml:"headers"`
	ForwardHeaders []string          `yaml:"forward_headers"`
	TLS            TLS               `yaml:"tls"`

	Command []string `yaml:"command"`
	// Env is added to the child's environment, which is otherwise only
	// PATH, HOME, LANG and TMPDIR from Manifold's: the secrets its ${VAR}s
	// read stay with Manifold unless Env names them.
	Env map[string]string `yaml:"env"`
	Dir string            `yaml:"dir"`
	// PerPrincipal runs a process of the command per principal, started on
	// its first call, so that what the process asks (elicitation,
	// sampling) and keeps belongs to that principal alone.
	PerPrincipal bool `yaml:"per_principal"`

	// Protocol pins the revision: "auto" (probe), "2026-07-28" or a legacy one.
	Protocol string `yaml:"protocol"`
	// Timeout bounds one upstream call; CallTimeout bounds a tools/call.
	Timeout     time.Duration `yaml:"timeout"`
	CallTimeout time.Duration `yaml:"call_timeout"`
	// Tools and Prompts decide which of the upstream's tools and prompts
	// are listed and callable.
	Tools   Filter `yaml:"tools"`
	Prompts Filter `yaml:"prompts"`
	// MaxResponseBytes bounds one upstream message.
	MaxResponseBytes ByteSize `yaml:"max_response_bytes"`
	// DefaultTTL and DefaultScope stand in for the cache hints a legacy
	// server does not send. The default TTL, 0, caches nothing its owner
	// did not allow.
	DefaultTTL   time.Duration `yaml:"default_ttl"`
	DefaultScope string        `yaml:"default_scope"`
	// CacheKey says what keys the upstream's private entries: "credential"
	// (the caller's credential headers; the default) or "principal" (the
	// authenticated JWT principal, so a refreshed token keeps its entries).
	// An upstream that is not forwarded a credential cannot answer per
	// token, so its private entries are keyed by the principal either way.
	CacheKey string `yaml:"cache_key"`
	// Access, when set, shows the upstream only to principals with a
	// matching claim (any rule); to the others it does not exist.
	Access []AccessRule `yaml:"access"`
	// OAuth makes Manifold the upstream's OAuth client.
	OAuth *OAuth `yaml:"oauth"`
	// ToolCache caches the results of the upstream's read-only tools.
	ToolCache ToolCache `yaml:"tool_cache"`
}

// OAuth configures Manifold as the OAuth client of an upstream: per
// principal after the user's consent (mode user), or as itself
// (client_credentials).
type OAuth struct {
	Mode string `yaml:"mode"`
	// ClientID (and ClientSecret) are a registration made beforehand;
	// PrivateKeyFile, with ClientID, authenticates client_credentials
	// with private_key_jwt.
	ClientID       string `yaml:"client_id"`
	ClientSecret   string `yaml:"client_secret"`
	PrivateKeyFile string `yaml:"private_key_file"`
	// ClientMetadataURL is Manifold's Client ID Metadata Document.
	ClientMetadataURL string `yaml:"client_metadata_url"`
	// Scopes are asked for when neither the server's challenge nor its
	// metadata names any.
	Scopes []string `yaml:"scopes"`
	// TokenEndpoint is the security token service the caller's token is
	// exchanged at (mode exchange, RFC 8693), Audience what the exchanged
	// token is asked for (default: the upstream's url).
	TokenEndpoint string `yaml:"token_endpoint"`
	Audience      string `yaml:"audience"`
	// IdP is the organization's identity provider that turns the caller's
	// ID token into an ID-JAG for the upstream's authorization server
	// (mode enterprise).
	IdP *OAuthIdP `yaml:"idp"`
	// AssertionFile holds Manifold's workload JWT, read at each token
	// request (mode workload): the platform rotates it.
	AssertionFile string `yaml:"assertion_file"`
}

// OAuthIdP is Manifold's registration at an organization's identity
// provider (oauth mode enterprise).
type OAuthIdP struct {
	TokenEndpoint string `yaml:"token_endpoint"`
	ClientID      string `yaml:"client_id"`
	ClientSecret  string `yaml:"client_secret"`
}

// Filter selects names by glob (path.Match syntax, on the upstream's own
// names): those matching an allow entry (all, when there is none) and no
// deny entry.
type Filter struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
}

// TLS configures an HTTPS upstream.
type TLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// IsStdio reports whether the upstream is a child process.
func (u *Upstream) IsStdio() bool { return len(u.Command) > 0 }

// Namespace modes.
const (
	NamespacePrefix = "prefix"
	NamespaceNone   = "none"
)

// ProtocolAuto makes Manifold probe the upstream's era.
const ProtocolAuto = "auto"

// Problem is one thing wrong with a file, at a YAML path such as
// `upstreams[1].timeout`.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Error lists every problem found in a file.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d problem(s)", e.File, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Load reads, expands, decodes and validates the file at path. Relative
// paths in it are its folder's (see resolvePaths), and the files and
// programs it names are checked.
func Load(path string) (*Config, error) { return LoadWith(path, Flags{}) }

// LoadWith is Load with f set over the file's values before they are
// validated, so that a flag is held to the rules its key is.
func LoadWith(path string, f Flags) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, problems := parse(data, os.LookupEnv, f)
	if cfg != nil {
		cfg.resolvePaths(dir)
		problems = report(problems, cfg.checkFiles())
	}
	if len(problems) > 0 {
		return nil, &Error{File: path, Problems: inFileOrder(data, problems)}
	}
	cfg.File = path
	return cfg, nil
}

// Parse decodes and validates data, looking `${VAR}` references up with
// lookup. It returns the config only when there are no problems. It does
// not look at the file system: Load does.
func Parse(data []byte, lookup func(string) (string, bool)) (*Config, []Problem) {
	cfg, problems := parse(data, lookup, Flags{})
	if len(problems) > 0 {
		return nil, inFileOrder(data, problems)
	}
	return cfg, nil
}

// parse reports every problem of data in one pass: what is wrong in the
// tree (unknown keys, values that do not decode) is reported and cleared,
// the rest is decoded and validated. The config it returns, if any, is only
// for further checks when there are problems.
func parse(data []byte, lookup func(string) (string, bool), f Flags) (*Config, []Problem) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []Problem{{Message: "the file is empty"}}
		}
		return nil, []Problem{{Message: "not valid YAML: " + err.Error()}}
	}
	var problems []Problem
	expand(&root, "", lookup, &problems)
	checkKeys(&root, typeOfConfig, "", &problems)
	var cfg Config
	if err := root.Decode(&cfg); err != nil {
		// checkKeys decodes every leaf, so this is a shape it missed.
		return nil, append(problems, decodeProblems(err)...)
	}
	cfg.Flags = f
	if f.Listen != "" {
		cfg.Listen = f.Listen
	}
	cfg.applyDefaults()
	return &cfg, report(problems, cfg.validate())
}

// report adds the problems of a later check to those found so far, leaving
// out what is about a key already reported.
func report(problems, more []Problem) []Problem {
	found := problems
	for _, p := range more {
		if !covered(found, p) {
			problems = append(problems, p)
		}
	}
	return problems
}

func decodeProblems(err error) []Problem {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		ps := make([]Problem, 0, len(te.Errors))
		for _, e := range te.Errors {
			ps = append(ps, Problem{Message: e})
		}
		return ps
	}
	return []Problem{{Message: err.Error()}}
}
