package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type auditLine struct {
	Time       time.Time `json:"time"`
	Principal  string    `json:"principal"`
	Session    string    `json:"session"`
	Endpoint   string    `json:"endpoint"`
	Method     string    `json:"method"`
	Upstream   string    `json:"upstream"`
	Target     string    `json:"target"`
	Outcome    string    `json:"outcome"`
	Tier       string    `json:"tier"`
	DurationMs float64   `json:"durationMs"`
}

// readAudit waits until the file at path holds n lines, and parses them.
func readAudit(t *testing.T, path string, n int) (string, []auditLine) {
	t.Helper()
	var text string
	var lines []auditLine
	eventually(t, 5*time.Second, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text, lines = string(b), nil
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			var l auditLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("audit line %q: %v", sc.Text(), err)
			}
			lines = append(lines, l)
		}
		if len(lines) < n {
			return fmt.Errorf("%d audit lines, want %d", len(lines), n)
		}
		return nil
	})
	return text, lines
}

// One line per request, with who, what, where, how it ended, which tier
// answered and how long it took; and nothing secret: no token, no header
// value, no argument, no session id.
func TestAuditLog(t *testing.T) {
	is := newIssuer(t)
	up := serveHTTP(t, modernHandler(sdkToolServer("web", sdkOptions{resources: 2, ttlMs: 60_000, scope: "public"})))
	path := filepath.Join(t.TempDir(), "audit.log")
	p := startProxy(t, is.authYAML("")+fmt.Sprintf("audit: {file: %q}\nupstreams:", path)+
		httpUpstreamYAML("web", up.URL, "forward_headers: [Authorization, X-Tenant-Secret]"))
	tok := is.mint("rsa-1", claims{"sub": "alice"})
	as := func(method, name string) http.Header {
		h := headers(method, name)
		h.Set("Authorization", "Bearer "+tok)
		h.Set("X-Tenant-Secret", "header-value-Kq7")
		return h
	}
	for range 2 {
		post(t, p.URL, as("resources/read", "web+test://web/0"), rpcBody(1, "resources/read", `"uri":"web+test://web/0"`))
	}
	post(t, p.URL, as("tools/call", "web_echo"), rpcBody(1, "tools/call", `"name":"web_echo","arguments":{"text":"argument-payload-Zq9"}`))
	post(t, p.URL, as("resources/read", "web+test://web/missing"), rpcBody(1, "resources/read", `"uri":"web+test://web/missing"`))
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + tok}}
	r := post(t, p.URL, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := r.Header.Get("Mcp-Session-Id")
	h.Set("Mcp-Session-Id", sid)
	h.Set("MCP-Protocol-Version", "2025-11-25")
	post(t, p.URL, h, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"web+test://web/1"}}`)
	// Refused before the router: no token.
	post(t, p.URL, headers("resources/read", "web+test://web/0"), rpcBody(1, "resources/read", `"uri":"web+test://web/0"`))

	text, all := readAudit(t, path, 7)
	var lines, refused []auditLine
	for _, l := range all {
		if strings.HasPrefix(l.Outcome, "http-") {
			refused = append(refused, l)
		} else {
			lines = append(lines, l)
		}
	}
	// The refusal, before the router: a legacy initialize is a request
	// like any other, recorded with its principal.
	if len(refused) != 1 || refused[0].Method != "resources/read" || refused[0].Outcome != "http-401" || refused[0].Principal != "" {
		t.Errorf("records of requests the router did not answer: %+v", refused)
	}
	if len(lines) != 6 {
		t.Fatalf("%d records of the router, want 6 (one per request): %+v", len(lines), lines)
	}
	principal := fmt.Sprintf(`[%q,"alice"]`, is.URL)
	want := []auditLine{
		{Method: "resources/read", Upstream: "web", Target: "web+test://web/0", Outcome: "ok", Tier: "fill"},
		{Method: "resources/read", Upstream: "web", Target: "web+test://web/0", Outcome: "ok", Tier: "memory"},
		{Method: "tools/call", Upstream: "web", Target: "web_echo", Outcome: "ok", Tier: "upstream"},
		{Method: "resources/read", Upstream: "web", Target: "web+test://web/missing", Outcome: "-32602", Tier: "fill"},
		{Method: "initialize", Outcome: "ok"},
		{Method: "resources/read", Upstream: "web", Target: "web+test://web/1", Outcome: "ok", Tier: "fill"},
	}
	for i, w := range want {
		got := lines[i]
		if got.Method != w.Method || got.Upstream != w.Upstream || got.Target != w.Target || got.Outcome != w.Outcome || got.Tier != w.Tier ||
			got.Principal != principal || got.DurationMs <= 0 || time.Since(got.Time) > time.Minute {
			t.Errorf("line %d: %+v, want %+v as %s", i, got, w, principal)
		}
	}
	if lines[5].Session == "" || lines[0].Session != "" {
		t.Errorf("session digests: %q (legacy), %q (modern)", lines[5].Session, lines[0].Session)
	}
	// A listen stream flows through the audit link (its events are
	// flushed), and is recorded once acknowledged, as a request answered.
	st := listen(t, p.URL, 5, `{"resourcesListChanged":true}`, "Authorization", "Bearer "+tok)
	if ack := st.next(t, 5*time.Second); ack["method"] != "notifications/subscriptions/acknowledged" {
		t.Errorf("listen through the audit link: %v", ack)
	}
	if _, all = readAudit(t, path, 8); all[7].Method != "subscriptions/listen" || all[7].Outcome != "ok" || all[7].Principal != principal {
		t.Errorf("the listen stream's record: %+v", all[7])
	}
	st.close()
	for _, secret := range []string{tok, "Bearer", "header-value-Kq7", "argument-payload-Zq9", sid} {
		if strings.Contains(text, secret) {
			t.Errorf("the audit log contains %.40q", secret)
		}
	}
}

// A file that takes nothing more (a reader that stopped reading a pipe:
// a stalled disk, a hung mount) never slows a request: records beyond the
// queue are dropped and counted. SIGHUP reopens the file: after a rotation
// moved it, new lines go to a new file at the configured path.
func TestAuditNeverBlocksAndRotates(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "stalled")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, p := hintedProxy(t, fmt.Sprintf("audit: {file: %q}\n", fifo))
	t.Cleanup(func() { reader.Close() }) // before the proxy stops: its last write fails
	start := time.Now()
	for i := range 6000 {
		if r := readWith(t, p.URL, "h+test://pub/audited", ""); r.Status != 200 {
			t.Fatalf("read %d: HTTP %d", i, r.Status)
		}
	}
	if m := scrape(t, p.URL); counted(t, m, "manifold_audit_dropped_total") < 1 {
		t.Errorf("drops not counted:\n%s", grepLines(m, "audit"))
	}
	t.Logf("6000 reads against a stalled audit file in %v", time.Since(start))

	path, notes := filepath.Join(dir, "audit.log"), filepath.Join(dir, "notes")
	if err := os.Mkdir(notes, 0o700); err != nil || os.WriteFile(filepath.Join(notes, "welcome.md"), []byte("hello"), 0o600) != nil {
		t.Fatal("writing the notes folder")
	}
	o := startOps(t, fmt.Sprintf("audit: {file: %q}\nupstreams:\n  - name: notes\n    command: [%q, files, %q]\n", path, manifoldBin, notes))
	readText(t, o.MCP, "notes+file:///welcome.md")
	readAudit(t, path, 1)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := o.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		if _, err := os.Stat(path); err != nil {
			return err
		}
		return nil
	})
	readText(t, o.MCP, "notes+file:///welcome.md")
	readAudit(t, path, 1)
	if _, old := readAudit(t, path+".1", 1); len(old) != 1 {
		t.Errorf("the rotated file has %d lines, want 1", len(old))
	}
}
