// Package redistest runs a real redis-server for tests, on a free loopback
// port, and stops it when the test ends. Tests that need a shared tier use it
// rather than a fake: expiry, pipelines, pub/sub and reconnection behave as
// in production only against the real thing.
package redistest

import (
	"context"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Addr string

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
	s := &Server{t: t, Addr: addr}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Restart starts the server again on the same port (after Stop), or for the
// first time. Its data is gone: persistence is off. It may be called from
// any goroutine; a failure to start fails the test.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning", "--enable-debug-command", "local")
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
