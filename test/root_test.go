package test

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// GET / on the main listener names Manifold, its version and where MCP is
// served, as HTML to a browser and as text to anything else; it names no
// upstream and no endpoint that has access rules. Host and Origin are
// checked there as on every path.
func TestRootPage(t *testing.T) {
	dir, _ := filesTree(t)
	conf := fmt.Sprintf(`upstreams:
  - {name: hushed, command: [%q, files, %q]}
  - {name: other, command: [%q, files, %q]}
endpoints:
  - {path: /mcp/open, upstreams: [hushed]}
`, manifoldBin, dir, manifoldBin, dir)
	t.Run("open", func(t *testing.T) { checkRootPage(t, conf) })
	// With an endpoint that has access rules, every other path challenges a
	// caller without credentials; the root page is still open, and does not
	// name that endpoint.
	restricted := unusedIssuer + conf + "  - {path: /mcp/secret, upstreams: [other], access: [{claim: groups, values: [ops]}]}\n"
	t.Run("restricted", func(t *testing.T) { checkRootPage(t, restricted) })
}

func checkRootPage(t *testing.T, conf string) {
	p := startProxy(t, conf)
	root := strings.TrimSuffix(p.URL, "/mcp") + "/"
	out, err := exec.Command(manifoldBin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "manifold ")
	for _, c := range []struct{ accept, contentType string }{
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/html; charset=utf-8"},
		{"*/*", "text/plain; charset=utf-8"},
		{"", "text/plain; charset=utf-8"},
	} {
		h := http.Header{}
		if c.accept != "" {
			h.Set("Accept", c.accept)
		}
		status, header, body := rawGet(t, root, h)
		if status != http.StatusOK || header.Get("Content-Type") != c.contentType {
			t.Errorf("GET / (Accept %q): %d %q, want 200 %q: %s", c.accept, status, header.Get("Content-Type"), c.contentType, body)
			continue
		}
		for _, want := range []string{"Manifold", version, "/mcp", "/sse", "/mcp/open"} {
			if !strings.Contains(body, want) {
				t.Errorf("GET / (Accept %q) does not name %q:\n%s", c.accept, want, body)
			}
		}
		for _, hidden := range []string{"hushed", "other", "/mcp/secret"} {
			if strings.Contains(body, hidden) {
				t.Errorf("GET / (Accept %q) names %q:\n%s", c.accept, hidden, body)
			}
		}
	}
	for name, h := range map[string]http.Header{
		"Host":   {"Host": {"evil.example.com"}},
		"Origin": {"Origin": {"https://evil.example.com"}},
	} {
		if status, _, _ := rawGet(t, root, h); status != http.StatusForbidden {
			t.Errorf("GET / with a foreign %s: %d, want 403", name, status)
		}
	}
	if status, _, _ := rawGet(t, root+"nosuch", nil); status == http.StatusOK {
		t.Errorf("GET /nosuch: 200, want the root page at / only")
	}
}

// rawGet is a raw GET of url with h, whatever its body is.
func rawGet(t *testing.T, url string, h http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if host := h.Get("Host"); host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}
