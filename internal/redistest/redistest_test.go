package redistest

import (
	"context"
	"net"
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

// A port picked free can be taken by another test's process before
// redis-server binds it: the server is then started on another port, not
// reported as one that never answered.
func TestLaunchMovesOffATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	pick := func(t testing.TB) int {
		picks++
		if picks == 1 {
			return taken.Addr().(*net.TCPAddr).Port
		}
		return freePort(t)
	}
	s := &Server{t: t, Dir: t.TempDir()}
	_, port := launch(t, pick, s.args)
	if port == taken.Addr().(*net.TCPAddr).Port || picks != 2 {
		t.Fatalf("started on port %d after %d picks; the taken one is %s", port, picks, taken.Addr())
	}
	if !ping(context.Background(), addr(port)) {
		t.Errorf("no PING answer on the second port %d", port)
	}
}
