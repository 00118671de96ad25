package files

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/testmem"
)

// peer is a server serving over pipes, and the client's end of them.
type peer struct {
	in  *io.PipeWriter
	out *bufio.Scanner
}

func serve(t *testing.T, dir string, o Options) (*Server, *peer) {
	t.Helper()
	s, err := New(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(context.Background(), inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close(); <-done; s.Close() })
	sc := bufio.NewScanner(outR)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return s, &peer{in: inW, out: sc}
}

// answer is one JSON-RPC answer.
type answer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`

// ask sends a modern request and reads its answer.
func (p *peer) ask(t *testing.T, method, params string) answer {
	t.Helper()
	if params != "" {
		params += ","
	}
	if _, err := fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":1,"method":%q,"params":{%s%s}}`+"\n", method, params, modernMeta); err != nil {
		t.Fatal(err)
	}
	if !p.out.Scan() {
		t.Fatalf("%s: no answer: %v", method, p.out.Err())
	}
	var a answer
	if err := json.Unmarshal(p.out.Bytes(), &a); err != nil {
		t.Fatalf("%s: %v: %s", method, err, p.out.Bytes())
	}
	return a
}

type callResult struct {
	Content []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		URI      string `json:"uri"`
		Name     string `json:"name"`
		MIMEType string `json:"mimeType"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

func (r callResult) links() []string {
	var out []string
	for _, c := range r.Content {
		if c.Type == "resource_link" {
			out = append(out, c.URI)
		}
	}
	return out
}

func (r callResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text + "\n")
	}
	return b.String()
}

func (p *peer) search(t *testing.T, query string) callResult {
	t.Helper()
	q, _ := json.Marshal(query)
	a := p.ask(t, "tools/call", fmt.Sprintf(`"name":"search","arguments":{"query":%s}`, q))
	if a.Error != nil {
		t.Fatalf("search %q: error %d %s", query, a.Error.Code, a.Error.Message)
	}
	var r callResult
	if err := json.Unmarshal(a.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The search tool is listed read-only, in a list as cacheable as the
// server's others, and answers the files that contain every word (in any
// case) as resource links, each with its matching lines; hidden files,
// binary ones and files outside the folder are not searched.
func TestSearchTool(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "share")
	write(t, filepath.Join(dir, "a.md"), "# Alpha\nnothing here\nalpha and BETA\n")
	write(t, filepath.Join(dir, "sub", "b.txt"), "beta only")
	write(t, filepath.Join(dir, ".hidden.md"), "alpha beta")
	write(t, filepath.Join(dir, "bin.dat"), "alpha beta\x00\x01")
	write(t, filepath.Join(base, "outside.md"), "alpha beta")
	if err := os.Symlink(filepath.Join(base, "outside.md"), filepath.Join(dir, "escape.md")); err != nil {
		t.Fatal(err)
	}
	_, p := serve(t, dir, Options{TTL: 7e9})

	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
			Annotations map[string]any `json:"annotations"`
		} `json:"tools"`
		TTLMs      *int64 `json:"ttlMs"`
		CacheScope string `json:"cacheScope"`
	}
	if err := json.Unmarshal(p.ask(t, "tools/list", "").Result, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 || list.Tools[0].Name != "search" || list.Tools[0].Annotations["readOnlyHint"] != true {
		t.Fatalf("tools/list: %+v; want one tool search, readOnlyHint true", list.Tools)
	}
	if list.TTLMs == nil || *list.TTLMs != 7000 || list.CacheScope != "public" {
		t.Errorf("tools/list carries ttlMs %v, cacheScope %q; want 7000 and public as the other lists", list.TTLMs, list.CacheScope)
	}
	if d := list.Tools[0].Description; !strings.Contains(d, "at most 16 words") || !strings.Contains(d, "at most 1000 files read") {
		t.Errorf("the description does not say the bounds: %q", d)
	}

	r := p.search(t, "ALPHA beta")
	if got := r.links(); len(got) != 1 || got[0] != "file:///a.md" {
		t.Errorf("search ALPHA beta links %v; want [file:///a.md]\n%s", got, r.text())
	}
	if txt := r.text(); !strings.Contains(txt, "1: # Alpha") || !strings.Contains(txt, "3: alpha and BETA") || strings.Contains(txt, "nothing here") {
		t.Errorf("the matching lines of a.md are not those given:\n%s", txt)
	}
	if got := p.search(t, "beta").links(); strings.Join(got, " ") != "file:///a.md file:///sub/b.txt" {
		t.Errorf("search beta links %v; want a.md and sub/b.txt", got)
	}
	if r := p.search(t, "gamma"); len(r.links()) != 0 || r.IsError || !strings.Contains(r.text(), "No file") {
		t.Errorf("search gamma: %+v; want no link, saying so", r)
	}
	if r := p.search(t, "   "); !r.IsError {
		t.Errorf("an empty query: %+v; want isError", r)
	}
	if a := p.ask(t, "tools/call", `"name":"delete","arguments":{}`); a.Error == nil || a.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("an unknown tool: %+v; want -32602", a)
	}
}

// call runs the search tool on query in-process, measuring what it
// allocates.
func call(t *testing.T, s *Server, query string) (callResult, uint64) {
	t.Helper()
	params, _ := jsonrpc.ParseObject(json.RawMessage(fmt.Sprintf(`{"name":"search","arguments":{"query":%q}}`, query)))
	var res any
	var rpcErr *jsonrpc.Error
	n := testmem.Allocated(func() { res, rpcErr = s.call(context.Background(), params) })
	if rpcErr != nil {
		t.Fatalf("search: %v", rpcErr)
	}
	b, _ := json.Marshal(res)
	var r callResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r, n
}

// A search costs what its bounds allow whatever the folder holds: a huge
// file is read in its first MaxFileBytes (and a line without end in
// pieces), many files in their first thousand, many matches answered in
// twenty files of five lines; a query of many words is refused; each says
// so.
func TestSearchBounded(t *testing.T) {
	const limit = 1 << 20
	t.Run("huge file", func(t *testing.T) {
		dir := t.TempDir()
		line := strings.Repeat("filler words ", 7) + "\n"
		huge := strings.Repeat(line, 32*limit/len(line)) + "needle\n"
		write(t, filepath.Join(dir, "huge.txt"), huge)
		write(t, filepath.Join(dir, "oneline.txt"), strings.Repeat("x", 32*limit)+" needle")
		write(t, filepath.Join(dir, "short.txt"), "a needle\n")
		s, _ := serve(t, dir, Options{MaxFileBytes: limit})
		r, n := call(t, s, "needle")
		if got := r.links(); len(got) != 1 || got[0] != "file:///short.txt" {
			t.Errorf("links %v; want only short.txt (the others' needle is past %d bytes)", got, limit)
		}
		if !strings.Contains(r.text(), "2 files were read only in their first 1048576 bytes") {
			t.Errorf("the result does not say the files were cut:\n%s", r.text())
		}
		if n > 2<<20 {
			t.Errorf("searching 64 MiB of files allocated %.1f MiB; want under 2", float64(n)/(1<<20))
		}
		r, _ = call(t, s, "filler")
		if lines := strings.Count(r.text(), ": filler"); lines != maxLinesPerFile {
			t.Errorf("%d lines answered of a file matching on every line; want %d", lines, maxLinesPerFile)
		}
	})
	t.Run("many files", func(t *testing.T) {
		dir := t.TempDir()
		for i := range maxFilesRead + 500 {
			text := "hay\n"
			if i%100 == 0 {
				text = "needle\n"
			}
			write(t, filepath.Join(dir, fmt.Sprintf("f%05d.txt", i)), text)
		}
		s, _ := serve(t, dir, Options{})
		r, n := call(t, s, "needle")
		if got := len(r.links()); got != maxFilesRead/100 {
			t.Errorf("%d files answered; want the %d of the first %d files", got, maxFilesRead/100, maxFilesRead)
		}
		if !strings.Contains(r.text(), "only the first 1000 files were read") {
			t.Errorf("the result does not say the files read were cut:\n%s", r.text())
		}
		if n > 4<<20 {
			t.Errorf("searching 1500 files allocated %.1f MiB; want under 4", float64(n)/(1<<20))
		}
		r, _ = call(t, s, "hay")
		if got := len(r.links()); got != maxFilesAnswer || !strings.Contains(r.text(), "only the first 20 files that match are answered") {
			t.Errorf("%d files answered of ~1500 that match; want %d, saying so:\n%s", got, maxFilesAnswer, r.text())
		}
	})
	t.Run("many words", func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "a.txt"), "w1 w2\n")
		s, _ := serve(t, dir, Options{})
		many := strings.Repeat("w ", maxQueryWords+1)
		r, n := call(t, s, many)
		if !r.IsError || !strings.Contains(r.text(), "at most 16 are searched for") {
			t.Errorf("a query of %d words: %+v; want isError naming the bound", maxQueryWords+1, r)
		}
		if n > 64<<10 {
			t.Errorf("refusing a query of many words allocated %d bytes", n)
		}
		r, n = call(t, s, strings.Repeat("w", 1<<20))
		if !r.IsError || !strings.Contains(r.text(), "at most 1024 are searched for") {
			t.Errorf("a query of 1 MiB: %+v; want isError naming the bound", r)
		}
		if n > 3<<19 {
			t.Errorf("refusing a query of 1 MiB allocated %d bytes; want no more than its copy", n)
		}
		if r, _ := call(t, s, strings.TrimSpace(strings.Repeat("w1 ", maxQueryWords))); len(r.links()) != 1 {
			t.Errorf("a query of %d words is not searched: %+v", maxQueryWords, r)
		}
	})
}
