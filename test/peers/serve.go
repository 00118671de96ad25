package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// payload is the 1 KiB the resource holds and the tool answers.
var payload = strings.Repeat("manifold benchmark payload ", 38)[:1024]

// serveUpstream serves the go-sdk upstream statelessly, answering JSON,
// and prints its address on stdout.
func serveUpstream(addr string) error {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	s.AddResource(&mcp.Resource{URI: "test://bench/doc", Name: "doc", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://bench/doc", MIMEType: "text/plain", Text: payload}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: payload}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	return listenAndServe(addr, h)
}

// serveReverseProxy is the bare reference hop: the standard library's
// reverse proxy, nothing else.
func serveReverseProxy(addr, to string) error {
	target, err := url.Parse(to)
	if err != nil {
		return err
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.URL.Path = target.Path },
		FlushInterval: -1, // stream SSE answers as they come
	}
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64}
	return listenAndServe(addr, rp)
}

func listenAndServe(addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println(l.Addr().String())
	return http.Serve(l, h)
}
