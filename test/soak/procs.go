package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process of a soak, which can be stopped, killed and started
// again the same way (an upstream on the same port, Redis on its port).
type proc struct {
	name string
	bin  string
	args []string
	log  string // where its stdout and stderr go
	addr string // what it listens on, if anything: waited for at start

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// procs are every process a soak started; stopAll stops them all.
type procs struct {
	mu  sync.Mutex
	all []*proc
}

func (ps *procs) add(p *proc) *proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.all = append(ps.all, p)
	return p
}

// start runs p (again) and waits until its address accepts connections.
func (p *proc) start() error {
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	if p.addr == "" {
		return nil
	}
	return waitListening(p.addr, exited, 20*time.Second)
}

func waitListening(addr string, exited <-chan struct{}, within time.Duration) error {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before listening on %s", addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not listening on %s within %v", addr, within)
}

// pid is the running process's id, 0 when it does not run.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// signal sends sig and waits up to grace for the exit; then it kills.
func (p *proc) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
		return
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-exited
}

func (p *proc) stop() { p.signal(syscall.SIGTERM, 20*time.Second) }
func (p *proc) kill() { p.signal(syscall.SIGKILL, time.Second) }

// stopAll stops every process, the last started first (the replicas before
// the upstreams and Redis they use).
func (ps *procs) stopAll() {
	ps.mu.Lock()
	all := ps.all
	ps.mu.Unlock()
	for i := len(all) - 1; i >= 0; i-- {
		all[i].stop()
	}
}

// rssMiB is a process's resident set, from /proc.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) int {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(entries)
}

// children are the processes pid started (a replica's stdio upstreams).
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
