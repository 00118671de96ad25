package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool and prompt fixtures, the same on every kind of upstream, so a test
// can predict what Manifold must answer. On upstream NAME:
//   - echo {text}: "NAME: TEXT" (every upstream has it: names collide);
//   - progress: three progress notifications with the caller's token, then
//     "NAME: done";
//   - wait: blocks until cancelled (or 20 s), and reports it (see toolEvents);
//   - link (go-sdk only): a resource_link to test://NAME/0, an embedded
//     resource test://NAME/1, and structuredContent naming test://NAME/0;
//   - ask (go-sdk only): input_required with requestState "state-NAME",
//     complete ("NAME: answered") once retried with an input response;
//   - region {region, n} (go-sdk only): mirrored in Mcp-Param-Region and
//     Mcp-Param-N;
//   - bad_* (see withBadTools): invalid x-mcp-header annotations, which
//     both SDKs refuse to serve and Manifold must not list;
//   - prompt greet {who}: one user message "hello WHO from NAME", and
//     completions of who ("NAME-alice", "NAME-bob").

// toolEvents records what in-process tool handlers observed.
type toolEvents struct {
	mu        sync.Mutex
	started   map[string]int
	cancelled map[string]int
	calls     map[string]int
}

var events = &toolEvents{started: map[string]int{}, cancelled: map[string]int{}, calls: map[string]int{}}

func (e *toolEvents) add(m map[string]int, key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m[key]++
}

func (e *toolEvents) get(m map[string]int, key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return m[key]
}

// waitForCancel is the body of every wait tool: it reports its start and
// its cancellation, in process and on stderr (where a stdio child's words
// reach Manifold's log).
func waitForCancel(ctx context.Context, name string) {
	events.add(events.started, name)
	fmt.Fprintf(os.Stderr, "tool wait started on %s\n", name)
	select {
	case <-ctx.Done():
		events.add(events.cancelled, name)
		fmt.Fprintf(os.Stderr, "tool wait cancelled on %s\n", name)
	case <-time.After(20 * time.Second):
	}
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func objectSchema(props string) json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":` + props + `}`)
}

// addSDKTools gives a go-sdk server the tools and prompt above.
func addSDKTools(s *mcp.Server, name string) {
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: objectSchema(`{"text":{"type":"string"}}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a struct{ Text string }
		_ = json.Unmarshal(req.Params.Arguments, &a)
		events.add(events.calls, name+"/echo")
		return textResult(name + ": " + a.Text), nil
	})
	s.AddTool(&mcp.Tool{Name: "progress", InputSchema: objectSchema(`{}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for i := 1; i <= 3; i++ {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3, Message: name})
			}
			time.Sleep(20 * time.Millisecond) // the progress is spread in time, ahead of the answer
		}
		return textResult(name + ": done"), nil
	})
	s.AddTool(&mcp.Tool{Name: "wait", InputSchema: objectSchema(`{}`)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		waitForCancel(ctx, name)
		return textResult(name + ": waited"), nil
	})
	s.AddTool(&mcp.Tool{Name: "link", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		uri0, uri1 := "test://"+name+"/0", "test://"+name+"/1"
		return &mcp.CallToolResult{
			Content: []mcp.Content{
				&mcp.ResourceLink{URI: uri0, Name: "zero", MIMEType: "text/plain"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: uri1, MIMEType: "text/plain", Text: name + " resource 1"}},
			},
			StructuredContent: map[string]any{"uri": uri0},
		}, nil
	})
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: objectSchema(`{}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		events.add(events.calls, name+"/ask")
		if req.Params.RequestState != "state-"+name || len(req.Params.InputResponses) == 0 {
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{Message: "which?", RequestedSchema: map[string]any{"type": "object"}}},
				RequestState:  "state-" + name,
			}, nil
		}
		return textResult(name + ": answered"), nil
	})
	s.AddTool(&mcp.Tool{Name: "region", InputSchema: objectSchema(`{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a struct{ Region string }
			_ = json.Unmarshal(req.Params.Arguments, &a)
			return textResult(name + ": " + a.Region), nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
			{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"] + " from " + name}},
			{Role: "user", Content: &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://" + name + "/0", Text: name + " resource 0"}}},
		}}, nil
	})
}

// sdkToolServer is a go-sdk server with resources and the tools above.
func sdkToolServer(name string, o sdkOptions) *mcp.Server {
	o.completions = name
	s := newSDKServer(name, o)
	addSDKTools(s, name)
	return s
}

// streamingSDK serves s statelessly with SSE responses, so progress can
// travel ahead of the answer.
func streamingSDK(s *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
}

// mcpgoToolServer is an mcp-go server with echo, progress, wait and greet:
// legacy only (2025-11-25 and older), or with modern both eras (mcp-go's
// default).
func mcpgoToolServer(name string, modern bool) http.Handler {
	s := mcpgoserver.NewMCPServer("mcpgo-"+name, "1.0.0", mcpgoserver.WithResourceCapabilities(true, true),
		mcpgoserver.WithToolCapabilities(true), mcpgoserver.WithPromptCapabilities(true))
	s.AddResource(mcpgo.NewResource("test://"+name+"/0", "zero"), func(context.Context, mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: "test://" + name + "/0", Text: name + " resource 0"}}, nil
	})
	s.AddTool(mcpgo.NewTool("echo", mcpgo.WithString("text")), func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		events.add(events.calls, name+"/echo")
		return mcpgo.NewToolResultText(name + ": " + req.GetString("text", "")), nil
	})
	s.AddTool(mcpgo.NewTool("progress"), func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		srv := mcpgoserver.ServerFromContext(ctx)
		for i := 1; i <= 3; i++ {
			if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
				_ = srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": i, "total": 3, "message": name})
			}
			time.Sleep(20 * time.Millisecond) // the progress is spread in time, ahead of the answer
		}
		return mcpgo.NewToolResultText(name + ": done"), nil
	})
	s.AddTool(mcpgo.NewTool("wait"), func(ctx context.Context, _ mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		waitForCancel(ctx, name)
		return mcpgo.NewToolResultText(name + ": waited"), nil
	})
	s.AddPrompt(mcpgo.NewPrompt("greet", mcpgo.WithArgument("who")), func(_ context.Context, req mcpgo.GetPromptRequest) (*mcpgo.GetPromptResult, error) {
		return mcpgo.NewGetPromptResult("greeting", []mcpgo.PromptMessage{
			mcpgo.NewPromptMessage(mcpgo.RoleUser, mcpgo.NewTextContent("hello "+req.Params.Arguments["who"]+" from "+name)),
		}), nil
	})
	if modern {
		return mcpgoserver.NewStreamableHTTPServer(s)
	}
	return mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithStreamableHTTPProtocolVersions("2025-11-25", "2025-06-18", "2025-03-26"))
}

// withBadTools wraps a JSON-answering upstream so its tools/list pages also
// carry tools whose x-mcp-header annotations are invalid, as a server built
// without an SDK's checks might: the SDKs refuse to register such tools.
func withBadTools(next http.Handler) http.Handler {
	bad := `{"name":"bad_number","inputSchema":{"type":"object","properties":{"s":{"type":"number","x-mcp-header":"S"}}}},` +
		`{"name":"bad_space","inputSchema":{"type":"object","properties":{"s":{"type":"string","x-mcp-header":"A B"}}}},` +
		`{"name":"bad_twice","inputSchema":{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"X"},"b":{"type":"string","x-mcp-header":"x"}}}},`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") != "tools/list" {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := strings.Replace(rec.Body.String(), `"tools":[`, `"tools":[`+bad, 1)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write([]byte(body))
	})
}
