package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// runEnvironChild serves test://NAME/environ, whose text is the process's
// environment, one KEY=VALUE a line.
func runEnvironChild(name string) int {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	uri := "test://" + name + "/environ"
	s.AddResource(&mcp.Resource{URI: uri, Name: "environ"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: strings.Join(os.Environ(), "\n")}}}, nil
	})
	return runStdio(s)
}

// environUpstream is the YAML of a stdio upstream that serves its
// environment; extra lines go under it.
func environUpstream(name string, env map[string]string, extra ...string) string {
	env[childEnv] = "environ:" + name
	b, _ := json.Marshal(env)
	s := fmt.Sprintf("\n  - name: %s\n    command: [%q, \"-test.run=^$\"]\n    env: %s\n", name, os.Args[0], b)
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// childEnviron reads the environment the upstream's process was started
// with, through Manifold.
func childEnviron(t *testing.T, p *proxy, name string) map[string]string {
	t.Helper()
	uri := name + "+test://" + name + "/environ"
	r := post(t, p.URL, headers("resources/read", uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	var res readResult
	r.result(t, &res)
	env := map[string]string{}
	for _, kv := range strings.Split(res.Contents[0].Text, "\n") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// A stdio child gets PATH, HOME, LANG and TMPDIR from Manifold's
// environment, and its own env:, and nothing else: not the secrets the
// configuration reads as ${VAR}.
func TestStdioChildGetsMinimalEnvironment(t *testing.T) {
	t.Setenv("MANIFOLD_TEST_SECRET", "hunter2-do-not-pass")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TMPDIR", t.TempDir())
	p := startProxy(t, "cache: {secret: \"${MANIFOLD_TEST_SECRET}-padding\"}\nupstreams:"+
		environUpstream("plain", map[string]string{"GIVEN": "given-value"}))
	env := childEnviron(t, p, "plain")
	if v, ok := env["MANIFOLD_TEST_SECRET"]; ok {
		t.Errorf("the child inherited MANIFOLD_TEST_SECRET=%s", v)
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		if env[k] != os.Getenv(k) {
			t.Errorf("child %s=%q, want Manifold's %q", k, env[k], os.Getenv(k))
		}
	}
	if env["GIVEN"] != "given-value" {
		t.Errorf("child GIVEN=%q, want its env: value", env["GIVEN"])
	}
	for k := range env {
		switch k {
		case "PATH", "HOME", "LANG", "TMPDIR", "GIVEN", childEnv:
		default:
			t.Errorf("the child got %s, which neither the minimal set nor its env: names", k)
		}
	}
}

// A child gets what else it needs by name: env: may read Manifold's own
// environment, as ${VAR}, one variable at a time.
func TestStdioChildGetsWhatEnvNames(t *testing.T) {
	t.Setenv("MANIFOLD_TEST_SECRET", "shared-on-purpose")
	p := startProxy(t, "upstreams:"+environUpstream("named", map[string]string{"MANIFOLD_TEST_SECRET": "${MANIFOLD_TEST_SECRET}"}))
	env := childEnviron(t, p, "named")
	if env["MANIFOLD_TEST_SECRET"] != "shared-on-purpose" || env["PATH"] != os.Getenv("PATH") {
		t.Errorf("with env naming it: MANIFOLD_TEST_SECRET=%q PATH=%q", env["MANIFOLD_TEST_SECRET"], env["PATH"])
	}
}
