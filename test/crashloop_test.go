package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCrashy is a stdio child that notes its start in DIR/starts and, until
// DIR/healthy exists, says why it cannot run on stderr and exits 3, as a
// server missing its database would; then it serves as newSDKServer does.
func runCrashy(dir string) int {
	f, err := os.OpenFile(filepath.Join(dir, "starts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, os.Getpid())
		f.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "healthy")); err != nil {
		fmt.Fprintln(os.Stderr, "crashy: cannot open my database")
		return 3
	}
	return runStdio(newSDKServer("crashy", sdkOptions{resources: 1}))
}

func starts(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "starts"))
	return strings.Count(string(b), "\n")
}

// A stdio upstream in a crash loop is logged as an HTTP upstream's outage
// is: its first start and what it said, the first failure, then at most a
// line per 10 s with the count, then the recovery; not lines per restart
// (three each before: started, its stderr, exited).
func TestCrashLoopLogBounded(t *testing.T) {
	dir := t.TempDir()
	o := startOps(t, "upstreams:"+childUpstream("c", "crashy:"+dir))
	began := time.Now()
	eventually(t, 60*time.Second, func() error {
		if n := starts(dir); n < 8 {
			return fmt.Errorf("%d starts so far", n)
		}
		return nil
	})
	lines := o.logCount("upstream=c")
	allowed := 3 + int(time.Since(began)/(10*time.Second))
	if lines > allowed {
		t.Errorf("%d restarts logged %d lines, want at most %d:\n%s", starts(dir), lines, allowed, o.Logs.String())
	}
	if o.logCount("upstream=c", "cannot open my database") < 1 {
		t.Errorf("the child's own words are not in the log:\n%s", o.Logs.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "healthy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o.waitReady(t, http.StatusOK, map[string]string{"c": "ready"})
	eventually(t, 40*time.Second, func() error {
		if o.logCount("upstream recovered", "upstream=c") != 1 {
			return fmt.Errorf("no recovery line")
		}
		return nil
	})
	if n := o.logCount("upstream recovered", "upstream=c", "failures="); n != 1 {
		t.Errorf("the recovery line lacks the count:\n%s", o.Logs.String())
	}
}
