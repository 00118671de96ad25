//go:build conformance

// Package conformance runs the official MCP conformance suite against
// Manifold: the whole required 2026-07-28 server set and a few unscored
// scenarios, with the Go SDK's everything-server as its only upstream and
// names and URIs passed through unchanged (namespace: none), so the suite's
// fixed fixture names reach the fixture server. Run it with `make conformance`, which
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
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/cmd/manifold/process"
	"github.com/manifold-mcp/manifold/internal/config"
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

func TestConformance(t *testing.T) {
	node, cli, fixture := env(t, "CONFORMANCE_NODE"), env(t, "CONFORMANCE_CLI"), env(t, "CONFORMANCE_FIXTURE")

	upAddr := freeAddr(t)
	up := exec.Command(fixture, "-http", upAddr)
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
	url := "http://" + l.Addr().String() + "/mcp"

	required := requiredScenarios(t, node, cli, "2026-07-28")
	if len(required) != 37 {
		t.Fatalf("the pinned suite lists %d required 2026-07-28 server scenarios, want 37: %v", len(required), required)
	}
	for _, name := range append(required, unscored...) {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.Command(node, cli, "server", "--url", url, "--scenario", name, "--spec-version", "2026-07-28", "-o", out)
			output, err := cmd.CombinedOutput()
			t.Logf("%s", output)
			if err != nil {
				t.Errorf("suite exit: %v", err)
			}
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
			for _, c := range checks {
				if c.Status != "SUCCESS" && c.Status != "INFO" {
					t.Errorf("check %s: %s %s", c.ID, c.Status, c.ErrorMessage)
				}
			}
		})
	}
}

func waitListening(t *testing.T, addr string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s is not listening", addr)
}
