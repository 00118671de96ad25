package test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func runCLI(t testing.TB, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(manifoldBin, args...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

func TestCLIHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "manifold serve --config FILE"},
		{[]string{"serve", "--help"}, "-config"},
		{[]string{"validate", "--help"}, "-config"},
		{[]string{"files", "--help"}, "-page-size"},
	} {
		out, errOut, code := runCLI(t, "", c.args...)
		if code != 0 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%v: exit %d, output %q", c.args, code, out+errOut)
		}
	}
	if _, _, code := runCLI(t, "", "frobnicate"); code != 2 {
		t.Errorf("unknown command exit %d, want 2", code)
	}
}

// validate accepts the shipped example and lists every problem of a bad
// file with its YAML path.
func TestCLIValidate(t *testing.T) {
	// The example's commands are relative to the repository root.
	out, errOut, code := runCLI(t, "..", "validate", "--config", "config.example.yaml")
	if code != 0 {
		t.Fatalf("config.example.yaml: exit %d: %s%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(`
listen: nowhere
namespace: flat
max_request_bytes: lots
upstreams:
  - name: Docs
    url: ftp://example.com
  - name: notes
    command: [./x]
    urll: http://typo
    timeout: 10 parsecs
  - name: notes
    url: http://127.0.0.1:1/mcp
    headers: {Authorization: "Bearer ${MANIFOLD_TEST_SURELY_UNSET}"}
    forward_headers: [Content-Length]
    protocol: 1999-01-01
`), 0o644)
	out, errOut, code = runCLI(t, "", "validate", "--config", bad)
	if code != 1 {
		t.Fatalf("bad config: exit %d", code)
	}
	for _, want := range []string{
		"upstreams[1].urll: unknown key (did you mean \"url\"?)",
		"upstreams[1].timeout:",
		"max_request_bytes: invalid size",
		"upstreams[2].headers.Authorization: environment variable MANIFOLD_TEST_SURELY_UNSET is not set",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("output lacks %q:\n%s", want, errOut)
		}
	}
	// Once the file parses, validation reports every value problem at once.
	os.WriteFile(bad, []byte(`
listen: nowhere
namespace: flat
upstreams:
  - name: Docs
    url: ftp://example.com
  - name: notes
    command: [./x]
  - name: notes
    url: http://127.0.0.1:1/mcp
    forward_headers: [Content-Length]
    protocol: 1999-01-01
`), 0o644)
	_, errOut, code = runCLI(t, "", "validate", "--config", bad)
	for _, want := range []string{
		"listen: must be host:port",
		`namespace: must be "prefix" or "none"`,
		"upstreams[0].name:",
		"upstreams[0].url: must be an absolute http",
		`upstreams[2].name: "notes" is already the name of upstreams[1]`,
		"upstreams[2].forward_headers[0]:",
		"upstreams[2].protocol:",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("output lacks %q:\n%s", want, errOut)
		}
	}
	if code != 1 {
		t.Errorf("exit %d", code)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// `manifold serve` as a real process: it serves, and on SIGTERM drains and
// stops its upstream processes before exiting 0.
func TestCLIServeAndSignal(t *testing.T) {
	dir, _ := filesTree(t)
	port := freePort(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\nupstreams:\n  - name: one\n    command: [%q, files, %q]\n  - name: two\n    command: [%q, files, %q]\n",
		port, manifoldBin, dir, manifoldBin, dir)), 0o644)
	cmd := exec.Command(manifoldBin, "serve", "--config", cfg)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	logs := &logBuffer{}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(logs, sc.Text())
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	eventually(t, 10*time.Second, func() error {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err
	})
	if got := readText(t, url, "two+file:///b.txt"); got != "bee" {
		t.Errorf("read through the process = %q", got)
	}
	kids := childPIDs(cmd.Process.Pid)
	if len(kids) != 2 {
		t.Fatalf("%d upstream processes, want 2", len(kids))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, logs)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after SIGTERM\n%s", logs)
	}
	for _, k := range kids {
		if processAlive(k) {
			t.Errorf("upstream process %d survived shutdown", k)
		}
	}
	if !strings.Contains(logs.String(), "manifold stopped") {
		t.Errorf("no clean stop in the log:\n%s", logs)
	}
}
