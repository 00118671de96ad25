package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"testing"
	"time"
)

// stdioProcess is a real `manifold stdio`, asked one request at a time.
type stdioProcess struct {
	in    io.WriteCloser
	lines *bufio.Scanner
	logs  *logBuffer
}

// startStdio starts `manifold stdio` on yamlText, with args after it.
func startStdio(t *testing.T, yamlText string, args ...string) *stdioProcess {
	t.Helper()
	cmd := exec.Command(manifoldBin, append([]string{"stdio", "--config", writeConfig(t, yamlText)}, args...)...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	s := &stdioProcess{in: in, logs: &logBuffer{}}
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	s.lines = bufio.NewScanner(out)
	s.lines.Buffer(make([]byte, 64<<10), 1<<20)
	return s
}

// ask sends one request and returns its answer.
func (s *stdioProcess) ask(t *testing.T, id int, body string) *rawResponse {
	t.Helper()
	fmt.Fprintln(s.in, body)
	for s.lines.Scan() {
		var r rawResponse
		if err := json.Unmarshal(s.lines.Bytes(), &r); err != nil {
			t.Fatalf("not JSON: %s", s.lines.Text())
		}
		if string(r.ID) == fmt.Sprint(id) {
			r.Body = append([]byte(nil), s.lines.Bytes()...)
			return &r
		}
	}
	t.Fatalf("no answer to request %d; log:\n%s", id, s.logs.String())
	return nil
}

// A stdio caller is one principal: past its burst a request gets the
// error an HTTP caller gets, -32000 with data.retryAfterMs, and once the
// bucket refills it is served again.
func TestStdioPerPrincipalLimit(t *testing.T) {
	up := modernSDK(t, newHintedServer().Server)
	s := startStdio(t, "limits: {per_principal: {rate: 0.25, burst: 2}}\nupstreams:"+httpUpstreamYAML("h", up.URL))
	read := func(id int) *rawResponse {
		return s.ask(t, id, rpcBody(id, "resources/read", `"uri":"h+test://pub/stdio-limit"`))
	}
	for id := 1; id <= 2; id++ {
		if r := read(id); r.Error != nil {
			t.Fatalf("request %d within the burst: %s", id, r.Body)
		}
	}
	r := read(3)
	var data struct {
		RetryAfterMs *int64 `json:"retryAfterMs"`
	}
	if r.Error == nil || r.Error.Code != -32000 || json.Unmarshal(r.Error.Data, &data) != nil || data.RetryAfterMs == nil || *data.RetryAfterMs <= 0 {
		t.Fatalf("request past the burst: %s, want -32000 with data.retryAfterMs", r.Body)
	}
	id := 3
	eventually(t, 15*time.Second, func() error {
		id++
		if r := read(id); r.Error != nil {
			return fmt.Errorf("after the refill: %s", r.Body)
		}
		return nil
	})
}
