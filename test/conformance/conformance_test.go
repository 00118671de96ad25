//go:build conformance

// Package conformance runs the official MCP conformance suite against
// Manifold, with the Go SDK's everything-server as its only upstream and URIs
// passed through unchanged (namespace: none), so the suite's fixed fixture
// URIs reach the fixture server. Run it with `make conformance`, which
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
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/cmd/manifold/process"
	"github.com/manifold-mcp/manifold/internal/config"
)

// The scenarios Manifold must pass, each with checks that must succeed.
var scenarios = map[string][]string{
	"resources-list":              {"resources-list", "wire-schema-valid"},
	"resources-read-text":         {"resources-read-text", "wire-schema-valid"},
	"resources-read-binary":       {"resources-read-binary", "wire-schema-valid"},
	"resources-templates-read":    {"resources-templates-read", "wire-schema-valid"},
	"sep-2164-resource-not-found": {"sep-2164-no-empty-contents", "sep-2164-error-code", "sep-2164-data-uri", "wire-schema-valid"},
	"dns-rebinding-protection":    {"localhost-host-rebinding-rejected", "localhost-host-valid-accepted"},
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

	for name, required := range scenarios {
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
			status := map[string]string{}
			for _, c := range checks {
				status[c.ID] = c.Status
				if c.Status == "FAILURE" || c.Status == "WARNING" {
					t.Errorf("check %s: %s %s", c.ID, c.Status, c.ErrorMessage)
				}
			}
			for _, id := range required {
				if status[id] != "SUCCESS" {
					t.Errorf("required check %s: %q", id, status[id])
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
