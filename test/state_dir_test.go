package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A desktop user's consent outlives manifold stdio: the host is closed
// and started again with the same state directory (XDG_STATE_HOME), and
// the call succeeds without asking, nothing new registered at the
// authorization server, no new code exchanged. The state directory holds
// the grant and the registration sealed: no token in clear, files only
// its user may read.
func TestStdioOAuthSurvivesRestart(t *testing.T) {
	as := newAuthServer(t)
	state := t.TempDir()
	cfg := writeConfig(t, fmt.Sprintf("upstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n", as.MCP))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	first := &desktopHost{t: t, cfgPath: cfg, env: []string{"XDG_STATE_HOME=" + state}, user: "alice-at-crm"}
	cs := first.connect(ctx, "")
	if got, err := whoamiVia(ctx, cs); err != nil || got != "you are alice-at-crm" {
		t.Fatalf("the first call: %q, %v", got, err)
	}
	_ = cs.Close() // the host quits: manifold stdio's stdin ends
	if n := len(first.asked()); n != 1 {
		t.Fatalf("asked %d times", n)
	}
	if n := as.registrationCount(); n != 1 {
		t.Fatalf("%d registrations", n)
	}
	assertSealedState(t, filepath.Join(state, "manifold"), as)

	for _, version := range []string{"", "2025-11-25"} {
		again := &desktopHost{t: t, cfgPath: cfg, env: []string{"XDG_STATE_HOME=" + state}, user: "mallory"}
		cs := again.connect(ctx, version)
		if got, err := whoamiVia(ctx, cs); err != nil || got != "you are alice-at-crm" {
			t.Errorf("after a restart (version %q): %q, %v", version, got, err)
		}
		_ = cs.Close()
		if links := again.asked(); len(links) != 0 {
			t.Errorf("after a restart (version %q) the host was asked again: %v", version, links)
		}
	}
	if exchanges, _ := as.counts(); exchanges != 1 || as.registrationCount() != 1 {
		t.Errorf("after restarts: %d code exchanges, %d registrations; want 1 and 1", exchanges, as.registrationCount())
	}
}

// assertSealedState checks the state directory dir: it exists, its files
// are its user's alone, and none holds a token as's server issued, or its
// client id, in clear.
func assertSealedState(t *testing.T, dir string, as *authServer) {
	t.Helper()
	as.mu.Lock()
	var secrets []string
	for tok := range as.access {
		secrets = append(secrets, tok)
	}
	for tok := range as.refresh {
		secrets = append(secrets, tok)
	}
	as.mu.Unlock()
	secrets = append(secrets, "manifold-client", "alice-at-crm")
	files := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: others may read it", path, info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds %q in clear", path, s)
			}
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("the state directory %s: %d files, %v", dir, files, err)
	}
}
