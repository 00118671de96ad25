package oauth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testmem"
)

// Grants and registrations outlive the store (a restart reads them back),
// the file is its user's alone, a lower version never replaces a higher
// one, and what is not a grant or a registration never reaches the disk.
func TestFileStoreKeepsGrantsAcrossARestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Put(ctx, "tok:alice", Versioned{Value: []byte("sealed-2"), Version: 2}, time.Hour); !ok || err != nil {
		t.Fatalf("put: %v %v", ok, err)
	}
	if ok, _ := s.Put(ctx, "tok:alice", Versioned{Value: []byte("sealed-1"), Version: 1}, time.Hour); ok {
		t.Error("an older version replaced a newer one")
	}
	if _, err := s.Put(ctx, "pending:state", Versioned{Value: []byte("in-memory-only"), Version: 1}, time.Hour); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, "oauth-state.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v, mode %v; want 0600", err, info.Mode().Perm())
	}
	b, _ := os.ReadFile(filepath.Join(dir, "oauth-state.json"))
	if strings.Contains(string(b), "pending") {
		t.Errorf("a pending authorization reached the disk: %s", b)
	}
	again, _ := NewFileStore(dir)
	v, err := again.Get(ctx, "tok:alice")
	if err != nil || string(v.Value) != "sealed-2" || v.Version != 2 {
		t.Errorf("after a restart: %q v%d %v, want sealed-2 v2", v.Value, v.Version, err)
	}
	if _, err := again.Get(ctx, "pending:state"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a pending authorization outlived the process: %v", err)
	}
}

// The file is bounded: a store that would grow past 4 MiB refuses the
// write, and a file grown past it by someone else is refused on reading,
// having read no more than the bound (64 MiB on disk, a few MiB read).
func TestFileStoreBounded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, _ := NewFileStore(dir)
	big := []byte(strings.Repeat("x", 512<<10))
	var full error
	for i := 0; i < 16 && full == nil; i++ {
		_, full = s.Put(ctx, "tok:"+strings.Repeat("p", i+1), Versioned{Value: big, Version: 1}, time.Hour)
	}
	if full == nil || !strings.Contains(full.Error(), "full") {
		t.Fatalf("16 grants of 512 KiB (sealed, base64 in the file): want the store full, got %v", full)
	}
	if info, _ := os.Stat(filepath.Join(dir, "oauth-state.json")); info.Size() > maxStateBytes {
		t.Errorf("the state file is %d bytes, over its bound %d", info.Size(), maxStateBytes)
	}

	path := filepath.Join(dir, "oauth-state.json")
	if err := os.WriteFile(path, []byte(`{"tok:a":{"v":1,"d":"`+strings.Repeat("A", 64<<20)+`","e":0}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	read := testmem.Allocated(func() { _, err = s.Get(ctx, "tok:a") })
	if err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("a 64 MiB state file: want it refused as over the bound, got %v", err)
	}
	t.Logf("refusing a 64 MiB state file allocated %.1f MiB", float64(read)/(1<<20))
	if read > 1<<20 {
		t.Errorf("refusing a 64 MiB state file allocated %.1f MiB: it was read, not refused by its size", float64(read)/(1<<20))
	}
}

// A workload assertion is read afresh each time, and bounded: a file past
// 16 KiB is refused having read no more than the bound.
func TestWorkloadAssertionBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("a.b.c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readAssertion(path); err != nil || got != "a.b.c" {
		t.Fatalf("a JWT: %q %v", got, err)
	}
	if err := os.WriteFile(path, []byte(strings.Repeat("a", 32<<20)+".b.c"), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	read := testmem.Allocated(func() { _, err = readAssertion(path) })
	if err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("a 32 MiB assertion: want it refused as over the bound, got %v", err)
	}
	if read > 1<<20 {
		t.Errorf("refusing a 32 MiB assertion allocated %.1f MiB: it was read past its 16 KiB bound", float64(read)/(1<<20))
	}
}
