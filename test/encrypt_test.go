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

// A private entry in Redis is always sealed: a dump of Redis (SAVE,
// uncompressed) holds no private answer in clear, while a public one is
// there to find; another replica still serves the sealed entry as a Redis
// hit, to its caller only.
func TestEncryptedPrivateDump(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	conf := fmt.Sprintf("cache: {secret: seal-secret-0123456789, redis: {url: %q}}\n", rs.URL())
	a, b := cachedProxy(t, up.URL, conf), cachedProxy(t, up.URL, conf)
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
}
