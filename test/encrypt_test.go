package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// With cache.redis.encrypt_private, a dump of Redis (SAVE, uncompressed)
// holds no private answer in clear, while a public one is there to find;
// another replica still serves the sealed entry as a Redis hit, and a
// replica that does not seal takes it for a miss.
func TestEncryptedPrivateDump(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	conf := func(seal bool) string {
		return fmt.Sprintf("cache: {secret: seal-secret-0123456789, redis: {url: %q, encrypt_private: %v}}\n", rs.URL(), seal)
	}
	a, b := cachedProxy(t, up.URL, conf(true)), cachedProxy(t, up.URL, conf(true))
	private, _, _ := readAs(t, a.URL, "h+test://priv/sealed", "token-A")
	public, _, _ := readAs(t, a.URL, "h+test://pub/clear", "")
	// Replica b serves both from Redis, which also says they are stored
	// there (b finds them, or waits on a's fill lease until they are).
	if text, _, _ := readAs(t, b.URL, "h+test://priv/sealed", "token-A"); text != private || h.count("test://priv/sealed") != 1 {
		t.Errorf("replica b: %q with %d upstream calls, want %q from Redis", text, h.count("test://priv/sealed"), private)
	}
	if text, _, _ := readAs(t, b.URL, "h+test://pub/clear", ""); text != public || h.count("test://pub/clear") != 1 {
		t.Errorf("replica b: %q with %d upstream calls, want %q from Redis", text, h.count("test://pub/clear"), public)
	}

	ctx := context.Background()
	if err := rs.Client().ConfigSet(ctx, "rdbcompression", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rs.Client().Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	dump, err := os.ReadFile(filepath.Join(rs.Dir, "dump.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(dump, []byte(public)) {
		t.Fatalf("the public answer %q is not in the dump: the grep proves nothing", public)
	}
	for _, clear := range []string{private, "for=Bearer token-A call=1", "token-A"} {
		if bytes.Contains(dump, []byte(clear)) {
			t.Errorf("the dump holds %q in clear", clear)
		}
	}
	if text, _, _ := readAs(t, b.URL, "h+test://priv/sealed", "token-B"); !strings.Contains(text, "token-B") {
		t.Errorf("token-B was served %q", text)
	}
	clear := cachedProxy(t, up.URL, conf(false))
	if text, _, _ := readAs(t, clear.URL, "h+test://priv/sealed", "token-A"); !strings.Contains(text, "call=3") {
		t.Errorf("a replica that does not seal: %q, want a new upstream call", text)
	}
}
