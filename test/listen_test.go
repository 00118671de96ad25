package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveExample runs `manifold serve` on config.example.yaml as a checkout
// has it, moved by --listen to a port of the test's, and returns its /mcp
// URL once it accepts connections.
func serveExample(t *testing.T) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(manifoldBin, "serve", "--config", exampleSite(t), "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	return startServing(t, cmd, port)
}

// startServing starts cmd in a process group of its own (make and its
// child alike end with it) and waits until port accepts connections,
// failing at once if cmd exits first.
func startServing(t *testing.T, cmd *exec.Cmd, port int) string {
	t.Helper()
	logs := &logBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	eventually(t, 2*time.Minute, func() error {
		select {
		case <-exited:
			t.Fatalf("%v exited before serving on port %d: %s", cmd.Args, port, logs)
		default:
		}
		return dialPort(port)
	})
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// --listen moves the example off the file's 127.0.0.1:8080, which may be
// taken, to the port given.
func TestServeListenFlag(t *testing.T) {
	url := serveExample(t)
	if got := readText(t, url, "notes+file:///todo.txt"); got == "" {
		t.Errorf("the example's notes read empty through --listen")
	}
	_, errOut, code := runCLI(t, "", "serve", "--config", exampleSite(t), "--listen", "8080")
	if code != 2 || !strings.Contains(errOut, "--listen 8080: must be host:port") {
		t.Errorf("--listen 8080: exit %d, %q; want exit 2 naming the flag", code, errOut)
	}
}

// `make run LISTEN=host:port` serves the example there.
func TestMakeRunListen(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command("make", "-C", root, "run", fmt.Sprintf("LISTEN=127.0.0.1:%d", port))
	cmd.Env = os.Environ()
	url := startServing(t, cmd, port)
	if got := readText(t, url, "notes+file:///welcome.md"); got == "" {
		t.Errorf("the example's welcome note read empty through make run")
	}
}

func dialPort(port int) error {
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil {
		c.Close()
	}
	return err
}

// The example calls a tool: its two files upstreams each list search, the
// example's README call answers the welcome note as a resource link, and
// the example turns the tool cache on for them (the second call is a hit).
func TestExampleSearchTool(t *testing.T) {
	url := serveExample(t)
	var names []string
	eventually(t, 15*time.Second, func() error {
		names = names[:0]
		for _, page := range listAll(t, url, "tools/list") {
			for _, tool := range page.Tools {
				names = append(names, fmt.Sprint(tool["name"]))
			}
		}
		if !slices.Contains(names, "notes_search") || !slices.Contains(names, "docs_search") {
			return fmt.Errorf("tools/list names %v; want notes_search and docs_search", names)
		}
		return nil
	})
	first := callToolAs(t, url, "", "notes_search", `{"query":"Welcome"}`)
	body := string(first.Raw.Result)
	if first.IsError || !strings.Contains(body, `"type":"resource_link"`) || !strings.Contains(body, `"uri":"notes+file:///welcome.md"`) || !strings.Contains(string(first.Raw.Body), "# Welcome to Manifold") {
		t.Fatalf("notes_search Welcome answered %s; want a resource link to notes+file:///welcome.md with its matching line", first.Raw.Body)
	}
	if again := callToolAs(t, url, "", "notes_search", `{"query":"Welcome"}`); again.Cache == nil {
		t.Errorf("the second notes_search Welcome came from the upstream: the example's tool cache is off")
	}
}
