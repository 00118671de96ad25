// Package redistest runs real Redis for tests, on free loopback ports, and
// stops it when the test ends: one redis-server, a Cluster of three masters
// with a replica each, or a master, a replica and a sentinel. Tests that need a shared tier use it
// rather than a fake: expiry, pipelines, pub/sub and reconnection behave as
// in production only against the real thing.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

	mu   sync.Mutex
	proc *proc
}

// Start runs a redis-server with persistence off. A missing redis-server is
// a test failure, not a skip: `make test` installs it.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed; `make test` installs it (Debian package redis-server)")
	}
	s := &Server{t: t, Dir: t.TempDir()}
	t.Cleanup(s.Stop)
	p, port := launch(t, freePort, s.args)
	s.Addr, s.proc = addr(port), p
	return s
}

func (s *Server) args(port int) []string {
	return []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--loglevel", "warning", "--enable-debug-command", "local", "--dir", s.Dir}
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Restart starts the server again on the same port (stopping it first if
// it runs). Its data is gone: persistence is off. It may be called from
// any goroutine; a failure to start fails the test.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		// A process not stopped first would outlive the test: the new one
		// could not bind its port, and the old one would lose its handle.
		s.proc.kill()
		s.proc = nil
	}
	port, _ := strconv.Atoi(portOf(s.Addr))
	p, err := spawn(s.Dir, s.args(port)...)
	if err != nil {
		s.t.Errorf("restart redis-server on %s: %v", s.Addr, err)
		return
	}
	if err := p.up(s.Addr); err != nil {
		p.kill()
		s.t.Errorf("restart redis-server on %s: %v", s.Addr, err)
		return
	}
	s.proc = p
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// Pause stops the server's process (SIGSTOP) until Resume: its
// connections stay open and it answers nothing, as a hung Redis does.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		if err := s.proc.cmd.Process.Signal(sig); err != nil {
			s.t.Errorf("signal %v to redis-server on %s: %v", sig, s.Addr, err)
		}
	}
}

// Client returns a go-redis client for test setup and probes, closed when
// the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// proc is one redis-server process; its output is kept to say why it did
// not come up.
type proc struct {
	cmd    *exec.Cmd
	out    lockedBuffer
	exited chan struct{} // closed once the process has exited
}

func spawn(dir string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command("redis-server", args...), exited: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server %v: %w", args, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// up waits until the process answers PING on addr; it fails, with the
// process's output, if the process exits first or 10 s pass.
func (p *proc) up(addr string) error {
	// Whoever holds a taken port may accept and never answer: the wait
	// for PING ends when the process does.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		if ping(ctx, addr) {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-p.exited:
		return fmt.Errorf("%w: %s", errExited, bytes.TrimSpace(p.out.Bytes()))
	default:
		return fmt.Errorf("no answer to PING on %s within 10s: %s", addr, bytes.TrimSpace(p.out.Bytes()))
	}
}

// kill ends the process and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

var errExited = errors.New("redis-server exited")

// launchTries bounds the ports launch tries.
const launchTries = 5

// launch starts a redis-server with args(port) on a port pick returns, and
// waits for its PING. The port was free when picked, but a process of
// another test may bind it before this one does: a server that exits
// because its port is taken is started again on another.
func launch(t testing.TB, pick func(testing.TB) int, args func(port int) []string) (*proc, int) {
	t.Helper()
	for range launchTries {
		port := pick(t)
		p, err := spawn(t.TempDir(), args(port)...)
		if err != nil {
			t.Fatal(err)
		}
		err = p.up(addr(port))
		if err == nil {
			t.Cleanup(p.kill)
			return p, port
		}
		p.kill()
		if !errors.Is(err, errExited) || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("redis-server on port %d: %v", port, err)
		}
	}
	t.Fatalf("redis-server found its port taken %d times", launchTries)
	return nil, 0
}

func ping(ctx context.Context, addr string) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Ping(ctx).Err() == nil
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// lockedBuffer is a process's output, written by exec's copying goroutine
// while a test may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

// freePort returns a port that was free a moment ago.
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
}

// StartCluster runs six cluster-enabled redis-servers and joins them with
// redis-cli --cluster create.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	for range 6 {
		dir := t.TempDir()
		_, port := launch(t, freePortPair, func(port int) []string {
			return []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "1000",
				"--dir", dir, "--loglevel", "warning"}
		})
		c.Addrs = append(c.Addrs, addr(port))
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
			out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", portOf(a), "cluster", "info").Output()
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
		out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", portOf(a), "role").Output()
		if strings.HasPrefix(string(out), "slave") {
			if out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", portOf(a), "cluster", "failover").CombinedOutput(); err != nil {
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

// Sentinel is a master, its replica and one sentinel watching them.
type Sentinel struct {
	t          testing.TB
	Addr       string // the sentinel's
	MasterName string
	Nodes      []string // the data nodes, master first at the start
}

// StartSentinel runs a master, a replica of it, and a sentinel that fails
// over within about a second.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s := &Sentinel{t: t, MasterName: "manifold"}
	common := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"}
	_, master := launch(t, freePort, func(port int) []string {
		return append([]string{"--port", fmt.Sprint(port), "--dir", t.TempDir()}, common...)
	})
	_, replica := launch(t, freePort, func(port int) []string {
		return append([]string{"--port", fmt.Sprint(port), "--dir", t.TempDir(), "--replicaof", "127.0.0.1", fmt.Sprint(master)}, common...)
	})
	_, sentinel := launch(t, freePort, func(port int) []string {
		conf := filepath.Join(t.TempDir(), "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			port, s.MasterName, master, s.MasterName, s.MasterName)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{conf, "--sentinel"}
	})
	s.Addr = addr(sentinel)
	s.Nodes = []string{addr(master), addr(replica)}
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

// Master returns the address the sentinel names as master now.
func (s *Sentinel) Master() string {
	out, _ := exec.Command("redis-cli", "-p", portOf(s.Addr), "sentinel", "get-master-addr-by-name", s.MasterName).Output()
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
			last, _ = exec.Command("redis-cli", "-p", portOf(s.Addr), "sentinel", "failover", s.MasterName).CombinedOutput()
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

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
