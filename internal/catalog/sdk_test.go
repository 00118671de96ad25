package catalog

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type findArgs struct {
	Query string `json:"query"`
	Limit int    `json:"limit"`
}

type findResult struct {
	Tools []json.RawMessage `json:"tools"`
}

// serveFind connects a go-sdk client to a go-sdk server that lists Tools()
// and answers find_tools from ix, with the text of Summary and the
// structured content {"tools": [...]}. The SDK resolves both tools' schemas,
// validates find_tools' arguments (applying its defaults) and its result
// against them: the definitions are what a real peer accepts.
func serveFind(t *testing.T, ix *Index) *mcp.ClientSession {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "catalog", Version: "1"}, nil)
	for _, raw := range Tools() {
		var def mcp.Tool
		if err := json.Unmarshal(raw, &def); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		switch def.Name {
		case FindTools:
			mcp.AddTool(s, &def, func(_ context.Context, _ *mcp.CallToolRequest, in findArgs) (*mcp.CallToolResult, findResult, error) {
				found := ix.Find(in.Query, in.Limit)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: Summary(found)}}}, findResult{found}, nil
			})
		case CallTool:
			mcp.AddTool(s, &def, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
				return nil, nil, nil
			})
		}
	}
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// TestToolsThroughGoSDK: a go-sdk client lists exactly find_tools and
// call_tool, and find_tools {"query":"simple text"} answers the
// everything-server's simple-text tool first, whole, with 8 tools by
// default and the same first lines in its text; a limit past 50 is refused
// by the schema.
func TestToolsThroughGoSDK(t *testing.T) {
	cs := serveFind(t, Build(mergedFixtures(t)))
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 2 || list.Tools[0].Name != CallTool || list.Tools[1].Name != FindTools {
		t.Fatalf("tools/list = %+v, want call_tool and find_tools", list.Tools)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: FindTools, Arguments: map[string]any{"query": "simple text"}})
	if err != nil || res.IsError {
		t.Fatalf("find_tools: %v %+v", err, res)
	}
	var out findResult
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	found := names(t, out.Tools)
	if len(found) != defaultLimit || found[0] != "es_test_simple_text" || !strings.Contains(string(out.Tools[0]), `"inputSchema":{`) {
		t.Fatalf("find_tools answered %v: %s", found, out.Tools[0])
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !strings.HasPrefix(text, "es_test_simple_text: Tests simple text content response\n") || strings.Count(text, "\n") != defaultLimit {
		t.Errorf("text = %q", text)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: FindTools, Arguments: map[string]any{"query": "file", "limit": maxLimit + 1}})
	if err != nil || !res.IsError {
		t.Errorf("find_tools with limit %d: %v %+v, want a tool error", maxLimit+1, err, res)
	}
}
