package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseDefaultsAndEnv(t *testing.T) {
	cfg, problems := Parse([]byte(`
sessions:
  max: ${SESSIONS:-50}
upstreams:
  - name: docs
    url: ${DOCS_URL}
    headers: {Authorization: "Bearer ${TOKEN}"}
    timeout: ${TIMEOUT:-5s}
  - name: notes
    command: [files, "${DIR:-/srv/notes}"]
`), env(map[string]string{"DOCS_URL": "http://127.0.0.1:9001/mcp", "TOKEN": "a: b # not yaml"}))
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	u := cfg.Upstreams[0]
	if u.URL != "http://127.0.0.1:9001/mcp" || u.Headers["Authorization"] != "Bearer a: b # not yaml" {
		t.Errorf("expansion: %+v", u)
	}
	if cfg.Sessions.Max != 50 || u.Timeout != 5*time.Second {
		t.Errorf("typed defaults from ${VAR:-x}: sessions.max %d timeout %v", cfg.Sessions.Max, u.Timeout)
	}
	if cfg.Upstreams[1].Command[1] != "/srv/notes" || cfg.Upstreams[1].Timeout != DefaultTimeout {
		t.Errorf("second upstream: %+v", cfg.Upstreams[1])
	}
	if cfg.Listen != DefaultListen || cfg.Namespace != NamespacePrefix || cfg.MaxRequestBytes != DefaultMaxRequestBytes || u.Protocol != ProtocolAuto {
		t.Errorf("defaults: %+v", cfg)
	}
}

func TestParseProblemsNamePaths(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"upstreams: [{name: a, url: http://x/mcp, extra: 1}]", "upstreams[0].extra: unknown key"},
		{"upstreams: [{name: a, url: http://x/mcp, tls: {ca_fil: x}}]", `upstreams[0].tls.ca_fil: unknown key (did you mean "ca_file"?)`},
		{"upstreams: [{name: a, url: http://x/mcp, timeout: forever}]", "upstreams[0].timeout:"},
		{"upstreams: [{name: a, url: http://x/mcp, max_response_bytes: 10XB}]", `upstreams[0].max_response_bytes: "10XB" is not a size`},
		{"upstreams: {name: a}", "upstreams: must be a list"},
		{"upstreams: []", "upstreams: at least one upstream is required"},
		{"upstreams: [{name: -a, url: http://x/mcp}]", "upstreams[0].name:"},
		{"upstreams: [{name: a, url: http://u:p@x/mcp}]", "upstreams[0].url: must not carry credentials"},
		{"upstreams: [{name: a, command: [x], headers: {A: b}}]", "upstreams[0].headers: headers and forward_headers apply to HTTP"},
		{"upstreams: [{name: a, url: http://x/mcp, headers: {Mcp-Session-Id: x}}]", "upstreams[0].headers.Mcp-Session-Id: is managed by Manifold"},
		{"upstreams: [{name: a, url: http://x/mcp, tls: {cert_file: /nonexistent}}]", "upstreams[0].tls: cert_file and key_file go together"},
		{"cursor_secret: short\nupstreams: [{name: a, url: http://x/mcp}]", "cursor_secret: must be at least 16 characters"},
		{"log: {level: loud}\nupstreams: [{name: a, url: http://x/mcp}]", "log.level:"},
		{"upstreams: [{name: a, url: http://x/mcp, access: [{claim: groups, values: [eng]}]}]", "upstreams[0].access: needs auth.jwt or auth.principal_from"},
		{"auth: {jwt: {issuer: https://i, audiences: [a], jwks_file: j}}\nupstreams: [{name: a, url: http://x/mcp, access: [{values: [eng]}]}]", "upstreams[0].access[0].claim: is required"},
		{"auth: {jwt: {issuer: https://i, audiences: [a], jwks_file: j}}\nupstreams: [{name: a, url: http://x/mcp, access: [{claim: g}]}]", "upstreams[0].access[0].values: must name at least one value"},
		{"admin: {operators: [{claim: groups, values: [sre]}]}\nupstreams: [{name: a, url: http://x/mcp}]", "admin.operators: needs auth.jwt or auth.principal_from"},
		{"auth: {jwt: {issuer: https://i, audiences: [a], jwks_file: j}}\nadmin: {operators: [{claim: groups}]}\nupstreams: [{name: a, url: http://x/mcp}]", "admin.operators[0].values: must name at least one value"},
		{"upstreams: [{name: a, url: http://x/mcp, cache_key: token}]", "upstreams[0].cache_key: must be credential or principal"},
		{"upstreams: [{name: a, url: http://x/mcp, per_principal: true}]", "upstreams[0].per_principal: applies to stdio upstreams (command) only"},
		{"upstreams: [{name: a, command: [x], per_principal: true, default_scope: public}]", "upstreams[0].default_scope: must be private with per_principal"},
		{"upstreams: [{name: a, command: [x], per_principal: true, tool_cache: {ttl: 1m, scope: public}}]", "upstreams[0].tool_cache.scope: must be private with per_principal"},
		{"auth: {bearer_tokens: [\"sha256:abc\"]}\nupstreams: [{name: a, url: http://x/mcp}]", "auth.bearer_tokens[0]: sha256: must be followed by 64 hex digits"},
		{"auth: {jwt: {issuer: https://i, jwks_url: http://idp.example.com/jwks}}\nupstreams: [{name: a, url: http://x/mcp}]", "auth.jwt.jwks_url: must be https"},
		{"auth: {jwt: {issuer: https://i, audiences: [a]}}\nupstreams: [{name: a, url: http://x/mcp}]", "auth.jwt: needs exactly one of jwks_url and jwks_file"},
		{"auth: {jwt: {audiences: [a]}}\nupstreams: [{name: a, url: http://x/mcp}]", "auth.jwt.issuer: is required"},
		{"auth: {bearer_tokens: [static-token-0123456789], jwt: {issuer: my-idp, audiences: [x], jwks_url: \"https://idp/jwks\"}}\nupstreams: [{name: a, url: http://x/mcp}]", "auth.authorization_servers: must name at least one authorization server"},
		{"sessions: {max: 10, max_per_principal: 11}\nupstreams: [{name: a, url: http://x/mcp}]", "sessions.max_per_principal: must be at least 1 and at most sessions.max (10)"},
		{"listen: 0.0.0.0:8080\nupstreams: [{name: a, url: http://x/mcp, oauth: {mode: user}}]", "upstreams[0].oauth.mode: user keeps a token per principal, so it needs downstream authentication (auth) unless listen is a loopback address"},
		{"listen: :8080\nupstreams: [{name: a, url: http://x/mcp, oauth: {mode: user}}]", "upstreams[0].oauth.mode: user keeps a token per principal, so it needs downstream authentication (auth)"},
		{"listen: 10.0.0.1:8080\nauth: {bearer_tokens: [static-token-0123456789], authorization_servers: [https://as]}\nupstreams: [{name: a, url: http://x/mcp, oauth: {mode: user}}]", "public_url: is required with an upstream of oauth mode user"},
		{"public_url: http://manifold.example.com\nauth: {bearer_tokens: [static-token-0123456789], authorization_servers: [https://as]}\nupstreams: [{name: a, url: http://x/mcp, oauth: {mode: user}}]", "public_url: must be https outside loopback"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: client_credentials}}]", "upstreams[0].oauth.client_id: is required with mode client_credentials"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: exchange, client_id: m}}]", "upstreams[0].oauth.token_endpoint: is required with mode exchange"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: exchange, client_id: m, token_endpoint: http://sts.example.com/t}}]", "upstreams[0].oauth.mode: exchange exchanges the caller's token"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: exchange, client_id: m, token_endpoint: http://sts.example.com/t}}]", "upstreams[0].oauth.token_endpoint: must be an https URL"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: enterprise, client_id: m, idp: {token_endpoint: https://idp/t}}}]", "upstreams[0].oauth.idp.client_id: is required with mode enterprise"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: workload}}]", "upstreams[0].oauth.assertion_file: is required with mode workload"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: user, audience: x}}]", "upstreams[0].oauth.audience: is for mode exchange only"},
		{"upstreams: [{name: a, url: http://x/mcp, oauth: {mode: device}}]", "upstreams[0].oauth.mode: must be user, client_credentials, exchange, enterprise or workload"},
		{"upstreams: [{name: a, url: http://x/mcp, forward_headers: [authorization], oauth: {mode: client_credentials, client_id: c, client_secret: s}}]", "upstreams[0].forward_headers: must not forward Authorization to an OAuth upstream"},
		{"health: {probe_interval: 10ms}\nupstreams: [{name: a, url: http://x/mcp}]", "health.probe_interval: must be between 100ms and 5m"},
		{"", "the file is empty"},
		{"listen: [", "not valid YAML"},
	} {
		all := problemsOf(c.yaml)
		if !strings.Contains(strings.Join(all, "\n"), c.want) {
			t.Errorf("%q: problems %q lack %q", c.yaml, all, c.want)
		}
	}
}

func TestByteSize(t *testing.T) {
	cfg, problems := Parse([]byte("max_request_bytes: 512KiB\nupstreams: [{name: a, url: http://x/mcp, max_response_bytes: 2MB}]"), env(nil))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if cfg.MaxRequestBytes != 512<<10 || cfg.Upstreams[0].MaxResponseBytes != 2e6 {
		t.Errorf("sizes: %d %d", cfg.MaxRequestBytes, cfg.Upstreams[0].MaxResponseBytes)
	}
}

// config.example.yaml documents every key (as a setting or in a comment),
// and parses as it stands.
func TestExampleDocumentsEveryKey(t *testing.T) {
	text, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(reflect.Type, string)
	walk = func(tp reflect.Type, path string) {
		for tp.Kind() == reflect.Pointer || tp.Kind() == reflect.Slice || tp.Kind() == reflect.Map {
			tp = tp.Elem()
		}
		if tp.Kind() != reflect.Struct || tp == reflect.TypeFor[time.Duration]() {
			return
		}
		for name, ft := range yamlFields(tp) {
			if !regexp.MustCompile(`(?m)^[\s#-]*` + regexp.QuoteMeta(name) + `:`).Match(text) {
				t.Errorf("config.example.yaml does not mention %s%s", path, name)
			}
			walk(ft, path+name+".")
		}
	}
	walk(typeOfConfig, "")
	if _, problems := Parse(text, env(nil)); len(problems) > 0 {
		t.Errorf("config.example.yaml: %v", problems)
	}
}

// Filters take path.Match globs; a malformed one is a problem at its path.
// Long prefixed names are warnings, not problems.
func TestFiltersAndNameWarnings(t *testing.T) {
	_, problems := Parse([]byte("upstreams:\n  - name: a\n    url: http://x/mcp\n    tools: {allow: [\"[\"], deny: [\"ok*\"]}\n"), env(nil))
	if len(problems) != 1 || problems[0].Path != "upstreams[0].tools.allow[0]" {
		t.Errorf("problems %v", problems)
	}
	long := strings.Repeat("x", 45)
	cfg, problems := Parse([]byte("upstreams:\n  - name: "+long+"\n    url: http://x/mcp\n    tools: {allow: [\"a_tool_with_a_rather_long_name\", \"s*\"]}\n"), env(nil))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	ws := cfg.Warnings()
	if len(ws) != 2 || ws[0].Path != "upstreams[0].name" || ws[1].Path != "upstreams[0].tools.allow[0]" {
		t.Errorf("warnings %v", ws)
	}
	if cfg.Upstreams[0].CallTimeout != DefaultCallTimeout {
		t.Errorf("call_timeout default %v", cfg.Upstreams[0].CallTimeout)
	}
}

// A value of the wrong type is told in a user's words, naming what it
// should have been, never Go's or YAML's types; and the problems come in
// the order of the file, whichever pass found them.
func TestProblemsInWordsAndFileOrder(t *testing.T) {
	_, problems := Parse([]byte(`max_request_bytes: lots
cache:
  max_ttl: forever
subscriptions:
  max_uris_per_stream: many
  keepalive: 5
upstreams:
  - name: a
    url: http://127.0.0.1:1/mcp
    required: maybe
    timeout: 1.5
  - name: ""
    url: notaurl
namespace: weird
limits: {per_principal: {rate: fast}}
`), env(nil))
	want := []string{
		`max_request_bytes: "lots" is not a size`,
		`cache.max_ttl: "forever" is not a duration`,
		`subscriptions.max_uris_per_stream: "many" is not a whole number`,
		`subscriptions.keepalive: 5 is not a duration`,
		`upstreams[0].required: "maybe" is not true or false`,
		`upstreams[0].timeout: 1.5 is not a duration`,
		`upstreams[1].name: is required`,
		`upstreams[1].url: must be an absolute`,
		`namespace: must be "prefix" or "none"`,
		`limits.per_principal.rate: "fast" is not a number`,
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	if len(got) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d is %q, want it to start %q; all:\n%s", i, got[i], want[i], strings.Join(got, "\n"))
		}
		for _, jargon := range []string{"unmarshal", "!!", "time.Duration", "int64", "float64"} {
			if strings.Contains(got[i], jargon) {
				t.Errorf("problem %q speaks of %q", got[i], jargon)
			}
		}
	}
}

// On a loopback listener, an upstream of oauth mode user needs neither
// downstream authentication nor public_url: its callers are one local
// principal, and the browser comes back to the listener itself.
func TestOAuthUserOnLoopback(t *testing.T) {
	for listen, want := range map[string]string{"": "http://127.0.0.1:8080/oauth/callback", "localhost:9000": "http://localhost:9000/oauth/callback", "[::1]:7000": "http://[::1]:7000/oauth/callback"} {
		yaml := "upstreams: [{name: a, url: http://x/mcp, oauth: {mode: user}}]"
		if listen != "" {
			yaml = "listen: \"" + listen + "\"\n" + yaml
		}
		cfg, problems := Parse([]byte(yaml), env(nil))
		if len(problems) > 0 {
			t.Errorf("listen %q: %v", listen, problems)
			continue
		}
		if got := cfg.CallbackURL(); got != want {
			t.Errorf("listen %q: callback %q, want %q", listen, got, want)
		}
	}
}

// A key that was removed is refused by name, with what took its place, not
// as an unknown key or, worse, silently.
func TestRemovedKeysNameTheirReplacement(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"upstreams: [{name: a, url: http://x/mcp, retries: 0}]", "upstreams[0].retries: removed; an idempotent call"},
		{"upstreams: [{name: a, url: http://x/mcp, max_idle_conns: 2}]", "upstreams[0].max_idle_conns: removed; Manifold keeps"},
		{"upstreams: [{name: a, command: [x], inherit_env: true}]", "upstreams[0].inherit_env: removed; a child gets PATH, HOME, LANG and TMPDIR"},
		{"subscriptions: {max_streams: 5}\nupstreams: [{name: a, url: http://x/mcp}]", "subscriptions.max_streams: removed; subscriptions.max_bytes bounds the open streams"},
		{"subscriptions: {queue: 5}\nupstreams: [{name: a, url: http://x/mcp}]", "subscriptions.queue: removed; a subscriber's queue holds 64 notifications"},
		{"subscriptions: {max_uris_per_upstream: 5}\nupstreams: [{name: a, url: http://x/mcp}]", "subscriptions.max_uris_per_upstream: removed; an upstream is asked to watch at most ten times subscriptions.max_uris_per_stream"},
		{"audit: {format: json}\nupstreams: [{name: a, url: http://x/mcp}]", "audit.format: removed; the audit log is JSON lines"},
		{"cache: {secret: s-0123456789abcdef, redis: {url: redis://r, encrypt_private: false}}\nupstreams: [{name: a, url: http://x/mcp}]", "cache.redis.encrypt_private: removed; private entries in Redis are always sealed"},
		{"cache: {secret: s-0123456789abcdef, redis: {url: redis://r, breaker_failures: 1}}\nupstreams: [{name: a, url: http://x/mcp}]", "cache.redis.breaker_failures: removed; Redis is skipped for 5s after 5 consecutive failures"},
		{"cache: {secret: s-0123456789abcdef, redis: {url: redis://r, breaker_cooldown: 1s}}\nupstreams: [{name: a, url: http://x/mcp}]", "cache.redis.breaker_cooldown: removed; Redis is skipped"},
	} {
		if all := problemsOf(c.yaml); len(all) != 1 || !strings.HasPrefix(all[0], c.want) {
			t.Errorf("%q: problems %q, want one starting %q", c.yaml, all, c.want)
		}
	}
}

// problemsOf is what Parse says of yaml, each problem as printed.
func problemsOf(yaml string) []string {
	_, problems := Parse([]byte(yaml), env(nil))
	var all []string
	for _, p := range problems {
		all = append(all, p.String())
	}
	return all
}
