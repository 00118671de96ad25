package test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// filesTree makes a folder with text, binary, nested, hidden and symlinked
// entries, and a secret file beside it that must stay unreachable.
func filesTree(t testing.TB) (dir, secret string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "share")
	secret = filepath.Join(base, "secret.txt")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, ".git"), 0o755))
	must(os.WriteFile(secret, []byte("TOP SECRET"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "a.md"), []byte("# A\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "b.txt"), []byte("bee"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "c.json"), []byte(`{"c":1}`), 0o644))
	must(os.WriteFile(filepath.Join(dir, "image.png"), []byte{0x89, 'P', 'N', 'G', 0, 1, 2, 0xff}, 0o644))
	must(os.WriteFile(filepath.Join(dir, "sub", "deeper", "d.md"), []byte("deep"), 0o644))
	must(os.WriteFile(filepath.Join(dir, ".env"), []byte("TOKEN=hidden"), 0o644))
	must(os.WriteFile(filepath.Join(dir, ".git", "config"), []byte("hidden"), 0o644))
	must(os.Symlink(secret, filepath.Join(dir, "escape.txt")))
	must(os.Symlink(filepath.Dir(secret), filepath.Join(dir, "up")))
	must(os.Symlink("b.txt", filepath.Join(dir, "inside.txt")))
	return dir, secret
}

// `manifold files` behind the proxy: listing with pagination, text and
// binary reads with MIME types, and no way out of the folder.
func TestFilesServer(t *testing.T) {
	dir, _ := filesTree(t)
	p := startProxy(t, fmt.Sprintf("upstreams:\n  - name: fs\n    command: [%q, files, --page-size, \"2\", %q]\n", manifoldBin, dir))

	pages := listAll(t, p.URL, "resources/list")
	got := uris(pages)
	want := []string{"fs+file:///a.md", "fs+file:///b.txt", "fs+file:///c.json", "fs+file:///image.png", "fs+file:///sub/deeper/d.md"}
	if !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v (no hidden files, no symlinks)", got, want)
	}
	if len(pages) != 3 {
		t.Errorf("%d pages of 2 for 5 files", len(pages))
	}

	var tpl listResult
	post(t, p.URL, headers("resources/templates/list", ""), rpcBody(1, "resources/templates/list", "")).result(t, &tpl)
	if len(tpl.ResourceTemplates) != 1 || tpl.ResourceTemplates[0]["uriTemplate"] != "fs+file:///{path}" {
		t.Errorf("templates = %v", tpl.ResourceTemplates)
	}

	read := func(uri string) *rawResponse {
		return post(t, p.URL, headers("resources/read", uri), rpcBody(3, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	}
	for _, c := range []struct{ uri, mime, text string }{
		{"fs+file:///a.md", "text/markdown", "# A\n"},
		{"fs+file:///c.json", "application/json", `{"c":1}`},
		{"fs+file:///sub/deeper/d.md", "text/markdown", "deep"},
		{"fs+file:///inside.txt", "text/plain", "bee"}, // a symlink that stays inside
	} {
		var rr readResult
		read(c.uri).result(t, &rr)
		if len(rr.Contents) != 1 || rr.Contents[0].Text != c.text || rr.Contents[0].MIMEType != c.mime || rr.Contents[0].URI != c.uri {
			t.Errorf("read %s = %+v", c.uri, rr.Contents)
		}
	}
	var bin readResult
	read("fs+file:///image.png").result(t, &bin)
	if b, _ := base64.StdEncoding.DecodeString(bin.Contents[0].Blob); len(b) != 8 || b[7] != 0xff || bin.Contents[0].MIMEType != "image/png" || bin.Contents[0].Text != "" {
		t.Errorf("binary read = %+v", bin.Contents)
	}

	for _, uri := range []string{
		"fs+file:///../secret.txt",
		"fs+file:///sub/../../secret.txt",
		"fs+file:///%2e%2e/secret.txt",
		"fs+file:///..%2fsecret.txt",
		"fs+file:///sub%2F..%2F..%2Fsecret.txt",
		"fs+file:////etc/passwd",
		"fs+file:///%2Fetc%2Fpasswd",
		"fs+file:///..%5csecret.txt",
		"fs+file:///escape.txt",    // symlink to a file outside
		"fs+file:///up/secret.txt", // symlink to a folder outside
		"fs+file:///.env",
		"fs+file:///.git/config",
		"fs+file:///sub",
		"fs+file:///nope.md",
		"fs+file://otherhost/a.md",
		"fs+file:///a.md?x=1",
		"fs+file:///a.md%00.txt",
		"fs+http://example.com/a.md",
	} {
		r := read(uri)
		r.wantError(t, http.StatusBadRequest, -32602)
		if strings.Contains(string(r.Body), "SECRET") || strings.Contains(string(r.Body), "hidden") {
			t.Errorf("read %s leaked: %s", uri, r.Body)
		}
		var data struct {
			URI string `json:"uri"`
		}
		if json.Unmarshal(r.Error.Data, &data) != nil || data.URI != uri {
			t.Errorf("read %s: data %s", uri, r.Error.Data)
		}
	}
	post(t, p.URL, headers("resources/list", ""), rpcBody(4, "resources/list", `"cursor":"bm90IGEgY3Vyc29y"`)).wantError(t, http.StatusBadRequest, -32602)
}

// The files server answers a legacy client's initialize too, on stdio.
func TestFilesServerLegacyHandshake(t *testing.T) {
	dir, _ := filesTree(t)
	cmd := exec.Command(manifoldBin, "files", dir)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("files server did not exit when stdin closed")
		}
	}()
	lines := bufio.NewScanner(out)
	send := func(s string) map[string]any {
		if _, err := fmt.Fprintln(in, s); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatal("no answer")
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	init := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`)
	res, _ := init["result"].(map[string]any)
	if res["protocolVersion"] != "2025-06-18" {
		t.Errorf("initialize answered %v", init)
	}
	if _, err := fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		t.Fatal(err)
	}
	read := send(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///b.txt"}}`)
	if !strings.Contains(fmt.Sprint(read["result"]), "bee") {
		t.Errorf("legacy read = %v", read)
	}
	if _, hasHints := read["result"].(map[string]any)["ttlMs"]; hasHints {
		t.Errorf("a legacy answer carries modern hints: %v", read)
	}
	ping := send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if ping["result"] == nil {
		t.Errorf("ping = %v", ping)
	}
}
