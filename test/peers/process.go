package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processes are the children of a run; every one is stopped at the end.
type processes []*exec.Cmd

type started struct {
	addr string
	pid  int
}

// startPrinting runs a component that prints its address on its first
// line of output.
func (ps *processes) startPrinting(bin string, args ...string) (started, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return started{}, err
	}
	if err := cmd.Start(); err != nil {
		return started{}, err
	}
	*ps = append(*ps, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return started{}, fmt.Errorf("%s printed no address: %w", bin, err)
	}
	return started{addr: strings.TrimSpace(line), pid: cmd.Process.Pid}, nil
}

// startListening runs a server and waits until addr accepts connections.
func (ps *processes) startListening(addr, bin string, args ...string) (int, error) {
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	*ps = append(*ps, cmd)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			time.Sleep(500 * time.Millisecond) // let it reach its upstream
			return cmd.Process.Pid, nil
		}
	}
	return 0, fmt.Errorf("%s did not listen on %s within 15s", bin, addr)
}

func (ps *processes) stopAll() {
	for _, cmd := range *ps {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// cpuTime is the user and system CPU a process has used so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// resetPeakRSS restarts the kernel's count of pid's peak RSS (VmHWM), so
// that a cell's peak is its own and not that of an earlier, busier cell.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// peakRSS is pid's peak RSS since the last reset, in bytes.
func peakRSS(pid int) int64 { return statusBytes(pid, "VmHWM:") }

// rss is pid's RSS now, in bytes.
func rss(pid int) int64 { return statusBytes(pid, "VmRSS:") }

// statusBytes reads a field of /proc/PID/status given in kB (0 if absent).
func statusBytes(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
