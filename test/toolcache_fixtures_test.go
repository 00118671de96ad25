package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool cache fixtures. Every tool answers with a text naming the caller
// (principalOf its Authorization header) and counting the server's calls
// of that tool with those arguments, so a test sees whom an answer was
// made for and whether it was made again:
//
//	search {q, n}  readOnlyHint: true   "search q=Q n=N for=WHO call=K"; an error for "Bearer denied"
//	slow {q}       readOnlyHint: true, answers after 300 ms
//	write {q}      not annotated        (always reaches the server)
//	fail {q}       readOnlyHint: true, answers isError: true
//	ask {}         readOnlyHint: true, input_required until retried with an answer (go-sdk only)
type toolCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *toolCounts) add(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[key]++
	return c.n[key]
}

func (c *toolCounts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// total counts the calls of tool with any arguments.
func (c *toolCounts) total(tool string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.n {
		if strings.HasPrefix(k, tool+" ") {
			n += v
		}
	}
	return n
}

// callKey names a call of tool with the arguments as the server decoded
// them (so that 1 and 1.0 are one, as they are to the tool).
func callKey(tool string, q string, n float64) string { return fmt.Sprintf("%s q=%s n=%g", tool, q, n) }

var readOnly = &mcp.ToolAnnotations{ReadOnlyHint: true}

// cachedToolServer is a go-sdk server with the tools above; its lists
// say ttlMs 60000, public.
func cachedToolServer(counts *toolCounts) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "tooled", Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 60_000, "public" },
	})
	answer := func(tool string, req *mcp.CallToolRequest) string {
		var a struct {
			Q string
			N float64
		}
		_ = json.Unmarshal(req.Params.Arguments, &a)
		who := ""
		if req.Extra != nil && req.Extra.Header != nil {
			who = principalOf(req.Extra.Header.Get("Authorization"))
		}
		k := callKey(tool, a.Q, a.N)
		return fmt.Sprintf("%s for=%s call=%d", k, who, counts.add(k))
	}
	schema := objectSchema(`{"q":{"type":"string"},"n":{"type":"number"}}`)
	s.AddTool(&mcp.Tool{Name: "search", InputSchema: schema, Annotations: readOnly}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Extra != nil && req.Extra.Header != nil && principalOf(req.Extra.Header.Get("Authorization")) == "Bearer denied" {
			return nil, errors.New("access denied")
		}
		return textResult(answer("search", req)), nil
	})
	s.AddTool(&mcp.Tool{Name: "slow", InputSchema: schema, Annotations: readOnly}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return textResult(answer("slow", req)), nil
	})
	s.AddTool(&mcp.Tool{Name: "write", InputSchema: schema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(answer("write", req)), nil
	})
	s.AddTool(&mcp.Tool{Name: "fail", InputSchema: schema, Annotations: readOnly}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r := textResult(answer("fail", req))
		r.IsError = true
		return r, nil
	})
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: objectSchema(`{}`), Annotations: readOnly}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		counts.add("ask ")
		if len(req.Params.InputResponses) == 0 {
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{Message: "which?", RequestedSchema: map[string]any{"type": "object"}}},
				RequestState:  "state-ask",
			}, nil
		}
		return textResult("answered"), nil
	})
	return s
}

// mcpgoCachedTools is an mcp-go server with search and write: both eras,
// or (legacy) 2025-11-25 and older only.
func mcpgoCachedTools(counts *toolCounts, modern bool) http.Handler {
	s := mcpgoCachedServer(counts)
	if modern {
		return mcpgoserver.NewStreamableHTTPServer(s)
	}
	return mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithStreamableHTTPProtocolVersions("2025-11-25", "2025-06-18", "2025-03-26"))
}

// mcpgoCachedServer is the mcp-go server of mcpgoCachedTools.
func mcpgoCachedServer(counts *toolCounts) *mcpgoserver.MCPServer {
	s := mcpgoserver.NewMCPServer("mcpgo-tooled", "1.0.0", mcpgoserver.WithToolCapabilities(true))
	handle := func(tool string) mcpgoserver.ToolHandlerFunc {
		return func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			k := callKey(tool, req.GetString("q", ""), req.GetFloat("n", 0))
			who := principalOf(req.Header.Get("Authorization"))
			return mcpgo.NewToolResultText(fmt.Sprintf("%s for=%s call=%d", k, who, counts.add(k))), nil
		}
	}
	s.AddTool(mcpgo.NewTool("search", mcpgo.WithString("q"), mcpgo.WithNumber("n"), mcpgo.WithReadOnlyHintAnnotation(true)), handle("search"))
	s.AddTool(mcpgo.NewTool("write", mcpgo.WithString("q"), mcpgo.WithNumber("n")), handle("write"))
	return s
}

// runCachedToolsChild is the stdio child "sdk-cached:NAME": the go-sdk
// server above (its counts are the child's own, seen in its answers).
func runCachedToolsChild() int {
	return runStdio(cachedToolServer(&toolCounts{n: map[string]int{}}))
}

// runMcpgoCachedChild is the stdio child "mcpgo-cached:NAME": the mcp-go
// server of mcpgoCachedTools, over stdio.
func runMcpgoCachedChild() int {
	if err := mcpgoserver.ServeStdio(mcpgoCachedServer(&toolCounts{n: map[string]int{}})); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// toolAnswer is what a tool call answered: its text, whether it is an
// error, and what its `_meta` says of the cache.
type toolAnswer struct {
	Text    string
	IsError bool
	Cache   map[string]any // io.manifold/cache; nil when it came from the upstream
	Raw     *rawResponse
}

// callAs calls tool at url with args (a JSON object) as tok, with more
// `_meta` members if given.
func callToolAs(t testing.TB, url, tok, tool, args string, meta ...string) toolAnswer {
	t.Helper()
	r := callToolRaw(t, url, tok, tool, args, meta...)
	var res struct {
		Content []struct{ Text string } `json:"content"`
		IsError bool                    `json:"isError"`
		TTL     *int64                  `json:"ttlMs"`
		Scope   *string                 `json:"cacheScope"`
		Meta    map[string]any          `json:"_meta"`
	}
	r.result(t, &res)
	if res.TTL != nil || res.Scope != nil {
		t.Errorf("%s: a tool result carries cache hints: %s", tool, r.Result)
	}
	a := toolAnswer{IsError: res.IsError, Raw: r}
	if len(res.Content) > 0 {
		a.Text = res.Content[0].Text
	}
	a.Cache, _ = res.Meta["io.manifold/cache"].(map[string]any)
	return a
}

// callToolRaw is callToolAs's request, and the answer as it came.
func callToolRaw(t testing.TB, url, tok, tool, args string, meta ...string) *rawResponse {
	t.Helper()
	m := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}` + strings.Join(append([]string{""}, meta...), ",") + `}`
	return post(t, url, as(tok)("tools/call", tool), fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s,%s}}`, tool, args, m))
}
