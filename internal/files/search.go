package files

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/internal/clip"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// The search tool's bounds: what one call may cost and answer, whatever
// the folder holds and the caller asks.
const (
	searchTool      = "search"
	maxQueryBytes   = 1 << 10
	maxQueryWords   = 16
	maxFilesRead    = 1000
	maxBytesRead    = 64 << 20 // in all, beside MaxFileBytes for each file
	maxFilesAnswer  = 20
	maxLinesPerFile = 5
	maxLineBytes    = 200
	// searchChunk is the longest line searched whole; a longer one is
	// searched in pieces of this size, and a word across two is missed.
	searchChunk = 64 << 10
)

func (s *Server) tools() any {
	return map[string]any{"tools": []any{map[string]any{
		"name":  searchTool,
		"title": "Search the files",
		"description": fmt.Sprintf("Find the folder's text files that contain every word of query (case-insensitive). "+
			"Answers each as a resource link with its matching lines. Bounds: at most %d words (%d bytes) in query; "+
			"at most %d files read, the first %d bytes of each and %d MiB in all; at most %d files answered, %d lines of each.",
			maxQueryWords, maxQueryBytes, maxFilesRead, s.o.MaxFileBytes, maxBytesRead>>20, maxFilesAnswer, maxLinesPerFile),
		"inputSchema": map[string]any{
			"type":     "object",
			"required": []string{"query"},
			"properties": map[string]any{
				"query": map[string]any{"type": "string", "description": "words, separated by spaces, every one of which a file must contain"},
			},
		},
		"annotations": map[string]any{"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
	}}}
}

func (s *Server) call(ctx context.Context, params jsonrpc.Object) (any, *jsonrpc.Error) {
	if name := params.String("name"); name != searchTool {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "unknown tool %q", clip.Text(name, 100))
	}
	args, _ := params.Object("arguments")
	words, problem := queryWords(args.String("query"))
	if problem != "" {
		return toolResult([]any{textContent(problem)}, true), nil
	}
	found, err := s.search(ctx, words)
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "search: %v", err)
	}
	return toolResult(found.content(), false), nil
}

// queryWords splits query into its words, or says why it cannot be
// searched for.
func queryWords(query string) ([][]byte, string) {
	if len(query) > maxQueryBytes {
		return nil, fmt.Sprintf("query is %d bytes long; at most %d are searched for", len(query), maxQueryBytes)
	}
	fields := strings.Fields(query)
	if len(fields) == 0 {
		return nil, "query must hold at least one word"
	}
	if len(fields) > maxQueryWords {
		return nil, fmt.Sprintf("query has %d words; at most %d are searched for", len(fields), maxQueryWords)
	}
	words := make([][]byte, len(fields))
	for i, f := range fields {
		words[i] = appendLower(nil, []byte(f))
	}
	return words, ""
}

func toolResult(content []any, isError bool) map[string]any {
	res := map[string]any{"content": content}
	if isError {
		res["isError"] = true
	}
	return res
}

func textContent(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

// hit is a file that contains every word, and the first of its lines that
// contain one.
type hit struct {
	path, mimeType string
	lines          []string
}

// searched is what one search found, and which of its bounds cut it short.
type searched struct {
	hits []hit
	cut  []string
}

func (r *searched) content() []any {
	var out []any
	for _, h := range r.hits {
		out = append(out,
			map[string]any{"type": "resource_link", "uri": "file:///" + h.path, "name": h.path, "mimeType": h.mimeType},
			textContent(h.path+"\n"+strings.Join(h.lines, "\n")))
	}
	if len(r.hits) == 0 {
		out = append(out, textContent("No file contains every word."))
	}
	if len(r.cut) > 0 {
		out = append(out, textContent("The search was cut short: "+strings.Join(r.cut, "; ")+"."))
	}
	return out
}

// errEnough ends a walk whose bounds are reached.
var errEnough = errors.New("enough")

// search walks the folder as list does, reading each regular file (within
// its bounds) for words.
func (s *Server) search(ctx context.Context, words [][]byte) (*searched, error) {
	res := &searched{}
	sc := &scratch{br: bufio.NewReaderSize(nil, searchChunk), lower: make([]byte, 0, searchChunk)}
	var filesRead int
	var budget int64 = maxBytesRead
	var longFiles int
	err := s.eachFile(func(p string, _ fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case filesRead == maxFilesRead:
			res.cut = append(res.cut, fmt.Sprintf("only the first %d files were read", maxFilesRead))
			return errEnough
		case budget <= 0:
			res.cut = append(res.cut, fmt.Sprintf("only the first %d MiB were read", maxBytesRead>>20))
			return errEnough
		case len(res.hits) == maxFilesAnswer:
			res.cut = append(res.cut, fmt.Sprintf("only the first %d files that match are answered", maxFilesAnswer))
			return errEnough
		}
		filesRead++
		h, n, long := s.searchFile(p, sc, min(s.o.MaxFileBytes, budget), words)
		budget -= n
		if long {
			longFiles++
		}
		if h != nil {
			res.hits = append(res.hits, *h)
		}
		return nil
	})
	if longFiles > 0 {
		res.cut = append(res.cut, fmt.Sprintf("%d files were read only in their first %d bytes", longFiles, s.o.MaxFileBytes))
	}
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	return res, nil
}

// scratch is the memory one search reuses for every file it reads.
type scratch struct {
	br    *bufio.Reader
	lower []byte
}

// searchFile reads at most limit bytes of the file at p, and returns it as
// a hit if it is text that contains every word, how many bytes it read,
// and whether the file went on past limit.
func (s *Server) searchFile(p string, sc *scratch, limit int64, words [][]byte) (h *hit, n int64, long bool) {
	br := sc.br
	if mt := mimeType(p, nil); mt != "application/octet-stream" && !textual(mt) {
		return nil, 0, false // known by its name not to be text: not read
	}
	f, err := s.root.Open(p)
	if err != nil {
		return nil, 0, false
	}
	defer f.Close()
	counted := &countingReader{r: io.LimitReader(f, limit+1)}
	br.Reset(counted)
	head, _ := br.Peek(512)
	mt := mimeType(p, head)
	if !textual(mt) || bytes.IndexByte(head, 0) >= 0 {
		return nil, counted.n, false
	}
	found := make([]bool, len(words))
	var lines []string
	var read int64
	for lineNo := 1; read < limit; {
		line, err := br.ReadSlice('\n')
		line = line[:min(int64(len(line)), limit-read)]
		read += int64(len(line))
		sc.lower = appendLower(sc.lower[:0], line)
		if matchLine(sc.lower, words, found) && len(lines) < maxLinesPerFile {
			lines = append(lines, fmt.Sprintf("%d: %s", lineNo, clip.Text(strings.TrimRight(string(line), "\r\n"), maxLineBytes)))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
		if bytes.HasSuffix(line, []byte("\n")) {
			lineNo++
		}
	}
	if read == limit {
		_, _ = br.Peek(1) // the one byte past limit that counted lets through
	}
	long = counted.n > limit
	for _, ok := range found {
		if !ok {
			return nil, counted.n, long
		}
	}
	return &hit{path: p, mimeType: mt, lines: lines}, counted.n, long
}

// matchLine marks in found the words lower (a line in lower case)
// contains, and reports whether it contains any.
func matchLine(lower []byte, words [][]byte, found []bool) bool {
	matched := false
	for i, w := range words {
		if bytes.Contains(lower, w) {
			found[i], matched = true, true
		}
	}
	return matched
}

// appendLower appends b in lower case to dst, as strings.ToLower would
// write it, without allocating when dst has room.
func appendLower(dst, b []byte) []byte {
	for len(b) > 0 {
		if c := b[0]; c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
			b = b[1:]
			continue
		}
		r, n := utf8.DecodeRune(b)
		dst = utf8.AppendRune(dst, unicode.ToLower(r))
		b = b[n:]
	}
	return dst
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
