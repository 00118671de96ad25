package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The upstreams of a soak: one go-sdk server, served over each transport
// Manifold speaks to, each in a process of its own. What every one holds is
// a function of its name, so the load can tell a right answer from a wrong
// one without asking anyone:
//
//	test://NAME/pub/I   "public NAME I", I < resourceCount, public
//	test://NAME/priv/me "private NAME for " + the Authorization the call came with, private
//	test://NAME/tick    announced as updated every second
//	tool echo {text}    "NAME echo: " + text
//	prompt greet {who}  "hello " + who + " from NAME"

const (
	resourceCount = 25
	pageSize      = 10
	entryTTLMs    = 3000
)

func publicText(name string, i int) string { return fmt.Sprintf("public %s %d", name, i) }
func privateText(name, authorization string) string {
	return "private " + name + " for " + authorization
}
func echoText(name, text string) string { return name + " echo: " + text }
func greeting(name, who string) string  { return "hello " + who + " from " + name }

// fixtureServer is the server every upstream of a soak runs.
func fixtureServer(name string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "soak-" + name, Version: "1"}, &mcp.ServerOptions{
		PageSize:           pageSize,
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
		SetCacheable: func(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
			c.TTLMs, c.CacheScope = entryTTLMs, "public"
			if r, ok := req.(*mcp.ReadResourceRequest); ok && strings.Contains(r.Params.URI, "/priv/") {
				c.CacheScope = "private"
			}
		},
	})
	text := func(uri, body string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: body}}}
	}
	for i := range resourceCount {
		uri := fmt.Sprintf("test://%s/pub/%d", name, i)
		s.AddResource(&mcp.Resource{URI: uri, Name: fmt.Sprintf("pub-%d", i), MIMEType: "text/plain"},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return text(uri, publicText(name, i)), nil
			})
	}
	priv := "test://" + name + "/priv/me"
	s.AddResource(&mcp.Resource{URI: priv, Name: "priv", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			var auth string
			if req.Extra != nil && req.Extra.Header != nil {
				auth = req.Extra.Header.Get("Authorization")
			}
			return text(priv, privateText(name, auth)), nil
		})
	tick := "test://" + name + "/tick"
	s.AddResource(&mcp.Resource{URI: tick, Name: "tick", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return text(tick, "tick"), nil
		})
	type echoArgs struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: echoText(name, a.Text)}}}, nil, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: greeting(name, req.Params.Arguments["who"])}}}}, nil
		})
	go func() {
		for range time.Tick(time.Second) {
			_ = s.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: tick})
		}
	}()
	return s
}

// serveUpstream runs the fixture named name over transport kind: modern
// (stateless Streamable HTTP, 2026-07-28), legacy (Streamable HTTP with
// sessions), sse (the 2024-11-05 HTTP+SSE transport, at /sse) or stdio.
// An HTTP one listens on addr.
func serveUpstream(kind, name, addr string) error {
	s := fixtureServer(name)
	get := func(*http.Request) *mcp.Server { return s }
	var h http.Handler
	switch kind {
	case "stdio":
		return s.Run(context.Background(), &mcp.StdioTransport{})
	case "modern":
		h = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	case "legacy":
		h = mcp.NewStreamableHTTPHandler(get, nil)
	case "sse":
		h = mcp.NewSSEHandler(get, nil)
	default:
		return fmt.Errorf("unknown upstream kind %q", kind)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return http.Serve(l, h)
}
