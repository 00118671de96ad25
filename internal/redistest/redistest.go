// Package redistest runs real Redis for tests, on free loopback ports, and
// stops it when the test ends: one redis-server, a Cluster of three masters
// with a replica each, or a master, a replica and a sentinel. Tests that need a shared tier use it
// rather than a fake: expiry, pipelines, pub/sub and reconnection behave as
// in production only against the real thing.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Addr string
	// Dir is the server's working directory: where SAVE writes dump.rdb.
	Dir string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start runs a redis-server with persistence off. A missing redis-server is
// a test failure, not a skip: `make test` installs it.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed; `make test` installs it (Debian package redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &Server{t: t, Addr: addr, Dir: t.TempDir()}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Restart starts the server again on the same port (stopping it first if
// it runs), or for the first time. Its data is gone: persistence is off. It
// may be called from any goroutine; a failure to start fails the test.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		// A process not stopped first would outlive the test: the new one
		// could not bind its port, and the old one would lose its handle.
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning", "--enable-debug-command", "local", "--dir", s.Dir)
	s.cmd.Dir = s.Dir
	if err := s.cmd.Start(); err != nil {
		s.t.Errorf("start redis-server: %v", err)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.ping() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Errorf("redis-server on %s did not answer PING", s.Addr)
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Client returns a go-redis client for test setup and probes, closed when
// the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) ping() bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err() == nil
}

// freePortPair returns a free port whose cluster bus port (port + 10000)
// is free too.
func freePortPair(t testing.TB) int {
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			bus.Close()
			return port
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// Cluster is a Redis Cluster of three masters, each with one replica,
// started for a test and stopped when it ends.
type Cluster struct {
	t     testing.TB
	Addrs []string
	nodes []*exec.Cmd
}

// StartCluster runs six cluster-enabled redis-servers and joins them with
// redis-cli --cluster create.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	t.Cleanup(c.stop)
	for i := 0; i < 6; i++ {
		port := freePortPair(t)
		dir := t.TempDir()
		cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "1000",
			"--dir", dir, "--loglevel", "warning")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a cluster node: %v", err)
		}
		c.nodes = append(c.nodes, cmd)
		c.Addrs = append(c.Addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	for _, a := range c.Addrs {
		waitPing(t, a)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitOK()
	return c
}

// waitOK waits until every node says the cluster is ok.
func (c *Cluster) waitOK() {
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range c.Addrs {
		for {
			out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", port(a), "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("cluster node %s is not ok: %s", a, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Failover makes every replica take over its master (CLUSTER FAILOVER), so
// every slot moves to another node, and waits for the cluster to settle.
func (c *Cluster) Failover() {
	for _, a := range c.Addrs {
		out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", port(a), "role").Output()
		if strings.HasPrefix(string(out), "slave") {
			if out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", port(a), "cluster", "failover").CombinedOutput(); err != nil {
				c.t.Errorf("cluster failover on %s: %v %s", a, err, out)
			}
		}
	}
	time.Sleep(2 * time.Second)
	c.waitOK()
}

// Keys lists the keys matching pattern on every master.
func (c *Cluster) Keys(pattern string) ([]string, error) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer rdb.Close()
	var mu sync.Mutex
	var all []string
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}

func (c *Cluster) stop() {
	for _, cmd := range c.nodes {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Sentinel is a master, its replica and one sentinel watching them.
type Sentinel struct {
	t          testing.TB
	Addr       string // the sentinel's
	MasterName string
	Nodes      []string // the data nodes, master first at the start
	procs      []*exec.Cmd
}

// StartSentinel runs a master, a replica of it, and a sentinel that fails
// over within about a second.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s := &Sentinel{t: t, MasterName: "manifold"}
	t.Cleanup(s.stop)
	master, replica, sentinel := freePortPair(t), freePortPair(t), freePortPair(t)
	common := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"}
	s.start(append([]string{"--port", fmt.Sprint(master)}, common...)...)
	s.start(append([]string{"--port", fmt.Sprint(replica), "--replicaof", "127.0.0.1", fmt.Sprint(master)}, common...)...)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
		sentinel, s.MasterName, master, s.MasterName, s.MasterName)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start(conf, "--sentinel")
	s.Addr = fmt.Sprintf("127.0.0.1:%d", sentinel)
	s.Nodes = []string{fmt.Sprintf("127.0.0.1:%d", master), fmt.Sprintf("127.0.0.1:%d", replica)}
	for _, p := range []int{master, replica, sentinel} {
		waitPing(t, fmt.Sprintf("127.0.0.1:%d", p))
	}
	// Wait until the replica is in sync and the sentinel knows it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("redis-cli", "-p", fmt.Sprint(sentinel), "sentinel", "replicas", s.MasterName).Output()
		if strings.Contains(string(out), fmt.Sprint(replica)) && !strings.Contains(string(out), "s_down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel never saw the replica: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

// start runs one process of the set in a folder of its own: a replica's
// first sync writes the master's dump there, never in the checkout.
func (s *Sentinel) start(args ...string) {
	dir := s.t.TempDir()
	if args[len(args)-1] != "--sentinel" {
		args = append(args, "--dir", dir)
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server %v: %v", args, err)
	}
	s.procs = append(s.procs, cmd)
}

// Master returns the address the sentinel names as master now.
func (s *Sentinel) Master() string {
	out, _ := exec.Command("redis-cli", "-p", port(s.Addr), "sentinel", "get-master-addr-by-name", s.MasterName).Output()
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return ""
	}
	return f[0] + ":" + f[1]
}

// Failover has the sentinel promote the replica, and waits until it names
// a new master. The sentinel refuses (NOGOODSLAVE) while its view of the
// replica is not fresh enough, which on a loaded machine happens; so it is
// asked again, each second, until it moves or 40 s have passed.
func (s *Sentinel) Failover() {
	before := s.Master()
	deadline := time.Now().Add(40 * time.Second)
	var last []byte
	var asked time.Time
	for ; s.Master() == before; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatalf("the sentinel did not fail over within 40s; its last answer: %s", last)
		}
		if time.Since(asked) > time.Second && !bytes.Contains(last, []byte("INPROG")) {
			last, _ = exec.Command("redis-cli", "-p", port(s.Addr), "sentinel", "failover", s.MasterName).CombinedOutput()
			asked = time.Now()
		}
	}
}

// Keys lists the keys matching pattern on the current master.
func (s *Sentinel) Keys(pattern string) ([]string, error) {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Addr}})
	defer rdb.Close()
	return rdb.Keys(context.Background(), pattern).Result()
}

func (s *Sentinel) stop() {
	for _, cmd := range s.procs {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func waitPing(t testing.TB, addr string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", port(addr), "ping").Run(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis on %s did not answer PING", addr)
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
