package redistest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Every Redis a test starts keeps its files (the dump a replica's sync
// writes, a SAVE's, a cluster's node table) out of the checkout: in the
// test's own temporary folder, which goes with the test.
func TestRedisWritesNothingInTheCheckout(t *testing.T) {
	root := checkout(t)
	var addrs []string
	addrs = append(addrs, Start(t).Addr)
	s := StartSentinel(t)
	addrs = append(addrs, s.Nodes...) // the sentinel itself writes only its config, in a temporary folder
	addrs = append(addrs, StartCluster(t).Addrs[:2]...)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		dir, err := c.ConfigGet(context.Background(), "dir").Result()
		c.Close()
		if err != nil {
			t.Fatalf("%s: CONFIG GET dir: %v", addr, err)
		}
		if d := dir["dir"]; d == "" || strings.HasPrefix(d+"/", root+"/") {
			t.Errorf("redis on %s writes its files in %q, inside the checkout %s", addr, d, root)
		}
	}
}

// checkout is the module's root: the folder holding go.mod.
func checkout(t *testing.T) string {
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}
