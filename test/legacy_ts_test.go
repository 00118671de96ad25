package test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The TypeScript SDK v1 client, which desktop and IDE hosts embed, through
// Manifold: it lists, reads, calls a tool, gets -32002 for a missing
// resource, subscribes and receives an update. `make test` installs it
// (scripts/node-deps) and names it in MANIFOLD_NODE and
// MANIFOLD_NODE_MODULES.
func TestLegacyTypeScriptClient(t *testing.T) {
	node := nodeOrSkip(t)
	script := tsScript(t, "legacy-client.mjs")
	p, s := legacyFixture(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, p.URL)
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	steps := map[string]json.RawMessage{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var line struct {
			Step  string          `json:"step"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			t.Fatalf("client said %q", sc.Text())
		}
		steps[line.Step] = line.Value
		if line.Step == "subscribed" {
			go func() { // again until the client reports it, as awaitWebUpdate does
				for ctx.Err() == nil {
					updateUpstream(t, s, "test://web/1")
					time.Sleep(300 * time.Millisecond)
				}
			}()
		}
	}
	for step, want := range map[string]string{
		"version": `"manifold"`, "read": `"web resource 0"`, "call": `"web: ts"`, "missing": `-32002`, "updated": `"web+test://web/1"`,
	} {
		if got := string(steps[step]); got != want {
			t.Errorf("%s: %s, want %s", step, got, want)
		}
	}
	if !strings.Contains(string(steps["resources"]), "web+test://web/0") {
		t.Errorf("resources: %s", steps["resources"])
	}
}

// nodeOrSkip returns the Node 22 that `make test` installs with the
// TypeScript SDK (scripts/node-deps), or skips the test without it.
func nodeOrSkip(t *testing.T) string {
	node, modules := os.Getenv("MANIFOLD_NODE"), os.Getenv("MANIFOLD_NODE_MODULES")
	if node == "" || modules == "" {
		t.Skip("MANIFOLD_NODE and MANIFOLD_NODE_MODULES are not set: run `make test`, which installs Node 22 and the TypeScript SDK")
	}
	return node
}

// tsScript returns the path of a runnable copy of test/ts/name: ES modules
// resolve packages next to the script, so the copy sits beside a link to
// the installed node_modules.
func tsScript(t *testing.T, name string) string {
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("ts", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, script, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(os.Getenv("MANIFOLD_NODE_MODULES"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return path
}
