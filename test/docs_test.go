package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// Every relative link of README.md, BENCHMARKS.md and docs/*.md names a
// file or folder of the repository, and every #anchor a heading of its
// target, as GitHub makes anchors of headings: a reader who follows a link
// lands where it says.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join("..", "README.md"), filepath.Join("..", "BENCHMARKS.md")}, pages...)
	checked := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(text)) {
			checked++
			if err := resolveLink(page, l.target); err != nil {
				t.Errorf("%s:%d: link %q: %v", strings.TrimPrefix(page, "../"), l.line, l.target, err)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d links found: the link reader is broken", checked)
	}
}

// GitHub's anchors, checked on headings whose slugs are known.
func TestDocsAnchorSlugs(t *testing.T) {
	for heading, want := range map[string]string{
		"Upstreams of 2024-11-05 (HTTP+SSE)":         "upstreams-of-2024-11-05-httpsse",
		"From a desktop host, or through mcp-remote": "from-a-desktop-host-or-through-mcp-remote",
		"`make dist`: release archives":              "make-dist-release-archives",
		"On the caller's behalf, and as a workload":  "on-the-callers-behalf-and-as-a-workload",
		"[Endpoints](endpoints.md) and the cache":    "endpoints-and-the-cache",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

type link struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	htmlAnchor = regexp.MustCompile(`<a (?:name|id)="([^"]+)"`)
	headingRe  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// markdownLinks returns the relative links of a page, outside code.
func markdownLinks(text string) []link {
	var out []link
	forEachProseLine(text, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if !strings.Contains(target, "://") && !strings.HasPrefix(target, "mailto:") {
				out = append(out, link{target, n})
			}
		}
	})
	return out
}

// forEachProseLine calls f on each line outside fenced code blocks.
func forEachProseLine(text string, f func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		default:
			f(i+1, line)
		}
	}
}

// resolveLink checks target, relative to page, against the repository.
func resolveLink(page, target string) error {
	path, anchor, _ := strings.Cut(target, "#")
	file := page
	if path != "" {
		file = filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
		rel, err := filepath.Rel("..", file)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("leaves the repository")
		}
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("no such file or folder")
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(file, ".md") {
		return fmt.Errorf("an anchor into a file that is not Markdown")
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if !anchors(string(text))[anchor] {
		return fmt.Errorf("no heading of %s has the anchor #%s", filepath.Base(file), anchor)
	}
	return nil
}

// anchors are a page's headings' slugs, numbered as GitHub numbers
// repeated ones (x, x-1, x-2), and its explicit HTML anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	forEachProseLine(text, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := headingRe.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	})
	return out
}

var linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor of a heading: its text without markup, lower
// case, letters, digits, spaces, '-' and '_' kept, spaces made '-'.
func slug(heading string) string {
	heading = linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
