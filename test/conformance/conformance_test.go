//go:build conformance

// Package conformance runs the official MCP conformance suite against
// Manifold: the whole required 2026-07-28 server set and a few unscored
// scenarios, and the required 2025-11-25 set for legacy callers (with a
// legacy and with a modern upstream), each time with the Go SDK's
// everything-server as its only upstream and names and URIs passed through
// unchanged (namespace: none), so the suite's fixed fixture names reach the
// fixture server. Run it with `make conformance`, which
// installs the pinned suite and server first (scripts/conformance).
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/cmd/manifold/process"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// Unscored scenarios that a proxy must pass all the same, beside the
// suite's required 2026-07-28 server set (which is read from the suite).
var unscored = []string{"http-header-validation", "http-custom-header-server-validation", "json-schema-2020-12"}

// requiredScenarios asks the suite for its required server scenarios of
// version.
func requiredScenarios(t *testing.T, node, cli, version string) []string {
	out, err := exec.Command(node, cli, "list", "--server", "--requirements", version).CombinedOutput()
	if err != nil {
		t.Fatalf("listing scenarios: %v\n%s", err, out)
	}
	var names []string
	inServer := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "Server scenarios"):
			inServer = true
		case strings.HasPrefix(line, "Client scenarios"):
			inServer = false
		case inServer && strings.HasPrefix(line, "  - "):
			names = append(names, strings.TrimPrefix(line, "  - "))
		}
	}
	return names
}

func env(t *testing.T, k string) string {
	v := os.Getenv(k)
	if v == "" {
		t.Fatalf("%s is not set: run `make conformance`", k)
	}
	return v
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// expectedFailures2025 are the 2025-11-25 scenarios that cannot pass with a
// modern (stateless) upstream, through any proxy: their tools ask the client
// with Session.CreateMessage or Elicit, which a 2026-07-28 server cannot do
// while serving a request (it must answer input_required instead).
var expectedFailures2025 = []string{"tools-call-sampling", "tools-call-elicitation", "elicitation-sep1034-defaults", "elicitation-sep1330-enums"}

// The required 2026-07-28 server set (37 scenarios) and three unscored
// ones, through Manifold to the fixture as a modern upstream.
func TestConformance2026(t *testing.T) {
	run := newRun(t, "-stateless=true")
	required := requiredScenarios(t, run.node, run.cli, "2026-07-28")
	if len(required) != 37 {
		t.Fatalf("the pinned suite lists %d required 2026-07-28 server scenarios, want 37: %v", len(required), required)
	}
	for _, name := range append(required, unscored...) {
		run.scenario(t, name, "2026-07-28", false)
	}
}

// The required 2025-11-25 server set (30 scenarios), for a legacy caller,
// through Manifold to the fixture as a stateful legacy upstream: every
// scenario passes, sampling and elicitation included (bridged both ways).
func TestConformance2025LegacyUpstream(t *testing.T) {
	run := newRun(t, "-stateless=false")
	required := requiredScenarios(t, run.node, run.cli, "2025-11-25")
	if len(required) != 30 {
		t.Fatalf("the pinned suite lists %d required 2025-11-25 server scenarios, want 30: %v", len(required), required)
	}
	for _, name := range required {
		run.scenario(t, name, "2025-11-25", false)
	}
}

// The same set with the fixture as a modern upstream: 26 pass; the four
// expected failures must fail (if one passed, the list is out of date).
func TestConformance2025ModernUpstream(t *testing.T) {
	run := newRun(t, "-stateless=true")
	for _, name := range requiredScenarios(t, run.node, run.cli, "2025-11-25") {
		run.scenario(t, name, "2025-11-25", slices.Contains(expectedFailures2025, name))
	}
}

// run is the suite pointed at a Manifold in front of one fixture process.
type run struct {
	node, cli, url string
}

func newRun(t *testing.T, stateless string) *run {
	node, cli, fixture := env(t, "CONFORMANCE_NODE"), env(t, "CONFORMANCE_CLI"), env(t, "CONFORMANCE_FIXTURE")
	upAddr := freeAddr(t)
	up := exec.Command(fixture, "-http", upAddr, stateless)
	up.Stdout, up.Stderr = os.Stderr, os.Stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Process.Kill(); _ = up.Wait() })
	waitListening(t, upAddr)

	cfg, problems := config.Parse([]byte(fmt.Sprintf("namespace: none\nupstreams:\n  - name: everything\n    url: http://%s/mcp\n", upAddr)), os.LookupEnv)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	srv, err := process.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	return &run{node: node, cli: cli, url: "http://" + l.Addr().String() + "/mcp"}
}

// scenario runs one scenario; every check must succeed, unless it is
// expected to fail, in which case some check must fail.
func (r *run) scenario(t *testing.T, name, version string, expectFailure bool) {
	t.Run(version+"/"+name, func(t *testing.T) {
		out := t.TempDir()
		output, _ := exec.Command(r.node, r.cli, "server", "--url", r.url, "--scenario", name, "--spec-version", version, "-o", out).CombinedOutput()
		t.Logf("%s", output)
		files, _ := filepath.Glob(filepath.Join(out, "*", "checks.json"))
		if len(files) != 1 {
			t.Fatalf("checks.json: %v", files)
		}
		b, _ := os.ReadFile(files[0])
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatal(err)
		}
		if len(checks) == 0 {
			t.Fatal("the scenario made no checks")
		}
		failed := 0
		for _, c := range checks {
			if c.Status != "SUCCESS" && c.Status != "INFO" {
				failed++
				if !expectFailure {
					t.Errorf("check %s: %s %s", c.ID, c.Status, c.ErrorMessage)
				}
			}
		}
		if expectFailure && failed == 0 {
			t.Errorf("%s is listed as an expected failure but passed: update expectedFailures2025", name)
		}
		logTally(t, len(checks), failed, expectFailure)
	})
}

// logTally writes the line the report (./report, docs/conformance.md)
// reads a scenario's checks from.
func logTally(t *testing.T, checks, failed int, expectFailure bool) {
	expected := ""
	if expectFailure {
		expected = " (expected)"
	}
	t.Logf("tally: %d checks, %d failed%s", checks, failed, expected)
}

func waitListening(t *testing.T, addr string) {
	eventually(t, 20*time.Second, func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// eventually waits for a condition (testwait.Eventually).
var eventually = testwait.Eventually
