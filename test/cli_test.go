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
		{[]string{"help"}, "manifold version"},
		{[]string{"serve", "--help"}, "--config FILE"},
		{[]string{"validate", "--help"}, "--config FILE"},
		{[]string{"stdio", "-h"}, "--config FILE"},
		{[]string{"files", "--help"}, "--page-size"},
	} {
		out, errOut, code := runCLI(t, "", c.args...)
		if code != 0 || !strings.Contains(out, c.want) || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and %q on stdout", c.args, code, out, errOut, c.want)
		}
	}
	for _, args := range [][]string{{"frobnicate"}, {"serve", "--confg", "x"}, {}} {
		out, errOut, code := runCLI(t, "", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "Usage") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", args, code, out, errOut)
		}
	}
}

// The version is set at build time by the Makefile and printed by both
// spellings, and the MCP serverInfo says the same.
func TestCLIVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manifold")
	build := exec.Command("make", "-C", "..", "build", "BIN="+bin, "VERSION=v9.8.7-test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || string(out) != "manifold v9.8.7-test\n" {
			t.Errorf("manifold %s: %q, %v", arg, out, err)
		}
	}
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n"
	cfg := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(cfg, []byte("upstreams:\n  - {name: a, url: \"http://127.0.0.1:1/mcp\"}\n"), 0o600)
	cmd := exec.Command(bin, "stdio", "--config", cfg)
	cmd.Stdin = strings.NewReader(in)
	out, _ := cmd.Output()
	if !strings.Contains(string(out), `"version":"v9.8.7-test"`) {
		t.Errorf("serverInfo does not carry the build's version: %s", out)
	}
}

// validate accepts the shipped example and lists every problem of a bad
// file, with its YAML path, in one run: unknown keys, values that do not
// decode, missing environment variables, invalid values and commands that
// cannot run.
func TestCLIValidate(t *testing.T) {
	out, errOut, code := runCLI(t, t.TempDir(), "validate", "--config", exampleSite(t))
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
  - name: runner
    command: [surely-not-a-program-on-path]
    dir: ./missing-dir
`), 0o644)
	_, errOut, code = runCLI(t, "", "validate", "--config", bad)
	if code != 1 {
		t.Fatalf("bad config: exit %d", code)
	}
	for _, want := range []string{
		"upstreams[1].urll: unknown key (did you mean \"url\"?)",
		"upstreams[1].timeout:",
		`max_request_bytes: "lots" is not a size`,
		`upstreams[1].timeout: "10 parsecs" is not a duration`,
		"upstreams[2].headers.Authorization: environment variable MANIFOLD_TEST_SURELY_UNSET is not set",
		"listen: must be host:port",
		`namespace: must be "prefix" or "none"`,
		"upstreams[0].name:",
		"upstreams[0].url: must be an absolute http",
		"upstreams[1].command[0]: " + filepath.Join(filepath.Dir(bad), "x") + ": no such file",
		`upstreams[2].name: "notes" is already the name of upstreams[1]`,
		"upstreams[2].forward_headers[0]:",
		"upstreams[2].protocol:",
		`upstreams[3].command[0]: "surely-not-a-program-on-path" is not on PATH`,
		"upstreams[3].dir: " + filepath.Join(filepath.Dir(bad), "missing-dir") + ": no such file",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("output lacks %q:\n%s", want, errOut)
		}
	}
	// A problem is reported once, at its own key: a value that did not
	// decode is not also reported as missing.
	if n := strings.Count(errOut, "upstreams[1].timeout"); n != 1 {
		t.Errorf("upstreams[1].timeout reported %d times:\n%s", n, errOut)
	}
	// In the order of the file, whichever check found each.
	last := -1
	for _, path := range []string{"listen:", "namespace:", "max_request_bytes:", "upstreams[0].name:", "upstreams[0].url:",
		"upstreams[1].command[0]:", "upstreams[1].urll:", "upstreams[1].timeout:", "upstreams[2].name:",
		"upstreams[2].headers.Authorization:", "upstreams[2].forward_headers[0]:", "upstreams[2].protocol:",
		"upstreams[3].command[0]:", "upstreams[3].dir:"} {
		i := strings.Index(errOut, "  "+path)
		if i < last {
			t.Errorf("%s is reported out of the file's order:\n%s", path, errOut)
		}
		last = max(last, i)
	}
}

// exampleSite lays config.example.yaml out in a folder as a checkout has it
// after `make build`: its commands are relative to its own folder, and run
// ./bin/manifold (here the binary TestMain built) on the repository's
// ./docs and ./examples, so it validates without a build of the checkout.
func exampleSite(t *testing.T) string {
	t.Helper()
	site := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(site, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/manifold": manifoldBin, "docs": filepath.Join(root, "docs"), "examples": filepath.Join(root, "examples")} {
		if err := os.Symlink(target, filepath.Join(site, link)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(site, "config.example.yaml")
	if err := os.WriteFile(path, example, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Relative paths in the file (command, dir, tls files) are the file's
// folder's, whatever the working directory; a stdio child without dir runs
// in that folder, so its own relative arguments are the file's too.
func TestCLIPathsRelativeToConfig(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "site")
	for _, d := range []string{"bin", "notes"} {
		if err := os.MkdirAll(filepath.Join(site, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.ReadFile(manifoldBin)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(site, "bin", "manifold"), exe, 0o755)
	os.WriteFile(filepath.Join(site, "notes", "a.txt"), []byte("relative"), 0o644)
	port := freePort(t)
	cfg := filepath.Join(site, "manifold.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\nupstreams:\n  - name: notes\n    command: [./bin/manifold, files, ./notes]\n", port)), 0o644)

	elsewhere := t.TempDir()
	if out, errOut, code := runCLI(t, elsewhere, "validate", "--config", cfg); code != 0 {
		t.Fatalf("validate from another folder: exit %d: %s%s", code, out, errOut)
	} else if want := cfg + ": ok (1 upstream)\n"; out != want {
		t.Errorf("validate said %q, want %q", out, want)
	}
	cmd := exec.Command(manifoldBin, "serve", "--config", cfg)
	cmd.Dir = elsewhere
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	waitListening(t, port)
	if got := readText(t, url, "notes+file:///a.txt"); got != "relative" {
		t.Errorf("read through a relative command = %q", got)
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
	waitListening(t, port)
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

// waitListening waits until something accepts connections on port.
func waitListening(t *testing.T, port int) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err
	})
}
