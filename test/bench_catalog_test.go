package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkFindTools compares, over a fleet of 40 upstreams × 50 tools
// (2,000 tools, their lists cacheable), what a host reads to choose a tool
// at a full endpoint (the whole merged tools/list, every page, from the
// cache) with one find_tools at a search endpoint over the same tools
// (the merged list from the cache, its index kept, the search). B/answer
// is the bytes the host receives: the context an agent's model is given.
func BenchmarkFindTools(b *testing.B) {
	yaml := searchEndpointYAML + "upstreams:"
	for i := range 40 {
		s := mcp.NewServer(&mcp.Implementation{Name: fmt.Sprint("fleet", i), Version: "1"}, &mcp.ServerOptions{
			SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 600_000, "public" },
		})
		for j := range 50 {
			verb, noun := fleetVerbs[j%len(fleetVerbs)], fleetNouns[(i*7+j/len(fleetVerbs))%len(fleetNouns)]
			s.AddTool(&mcp.Tool{
				Name:        fmt.Sprintf("%s_%s_%d", verb, noun, j),
				Description: fmt.Sprintf("%s a %s of the %s service, by its id or by a filter on its fields; answers the %s as JSON.", verb, noun, fleetNouns[i%len(fleetNouns)], noun),
				InputSchema: objectSchema(fmt.Sprintf(`{"id":{"type":"string","description":"the %s's id"},"filter":{"type":"string","description":"fields to match"}}`, noun)),
			}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("x"), nil })
		}
		yaml += httpUpstreamYAML(fmt.Sprint("s", i), modernSDK(b, s).URL)
	}
	p := startProxy(b, yaml)
	find := []byte(rpcBody(1, "tools/call", `"name":"find_tools","arguments":{"query":"archive an invoice"}`))
	b.Run("full-endpoint-tools-list-hit", func(b *testing.B) {
		n := benchListAll(b, p.URL)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			benchListAll(b, p.URL)
		}
		b.ReportMetric(float64(n), "B/answer")
	})
	b.Run("search-endpoint-find-tools", func(b *testing.B) {
		h := headers("tools/call", "find_tools")
		n := benchPostBytes(b, searchURL(p), h, find)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			benchPostBytes(b, searchURL(p), h, find)
		}
		b.ReportMetric(float64(n), "B/answer")
	})
	b.Run("search-endpoint-tools-list", func(b *testing.B) {
		b.ReportMetric(float64(benchPostBytes(b, searchURL(p), headers("tools/list", ""), []byte(rpcBody(1, "tools/list", "")))), "B/answer")
	})
}

var (
	fleetVerbs = []string{"get", "list", "create", "update", "delete", "archive", "search", "export", "import", "approve"}
	fleetNouns = []string{"invoice", "customer", "ticket", "order", "shipment", "repository", "deployment", "alert", "document", "payment", "contract", "employee"}
)

// benchListAll reads every page of /mcp's tools/list and returns the bytes
// received.
func benchListAll(b *testing.B, url string) int {
	total, cursor := 0, ""
	for range 100 {
		params := ""
		if cursor != "" {
			params = fmt.Sprintf(`"cursor":%q`, cursor)
		}
		out := benchPostRaw(b, url, headers("tools/list", ""), []byte(rpcBody(1, "tools/list", params)))
		total += len(out)
		var page struct {
			Result struct {
				NextCursor string `json:"nextCursor"`
			} `json:"result"`
		}
		_ = json.Unmarshal(out, &page)
		if cursor = page.Result.NextCursor; cursor == "" {
			return total
		}
	}
	b.Fatal("more than 100 pages")
	return 0
}

// benchPostBytes is benchPost returning the size of the answer.
func benchPostBytes(b *testing.B, url string, h http.Header, body []byte) int {
	return len(benchPostRaw(b, url, h, body))
}

// benchPostRaw is benchPost returning the answer.
func benchPostRaw(b *testing.B, url string, h http.Header, body []byte) []byte {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	req.Header = h
	resp, err := benchClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"result"`)) {
		b.Fatalf("HTTP %d: %s", resp.StatusCode, out)
	}
	return out
}
