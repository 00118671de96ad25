package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// payload is the 1 KiB the resources hold and the tool answers.
var payload = strings.Repeat("manifold benchmark payload ", 38)[:1024]

// cachedTTL is the freshness the upstream gives its cacheable resource:
// long enough that no scale run outlives an entry.
const cachedTTL = 600_000

// serveUpstream serves the go-sdk upstream statelessly, answering JSON,
// and prints its address on stdout. It answers resources/list after delay,
// so that a fan-out over several has a known slowest member.
func serveUpstream(addr string, delay time.Duration) error {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ServerOptions{
		// Accepted (and so advertised), so that a listen stream through
		// Manifold really watches a resource; nothing is ever updated.
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	addText(s, "test://bench/doc", mcp.Cacheable{})
	// The same bytes again, but marked cacheable (SEP-2549 hints at the top
	// of the result), so that Manifold's cache keeps it.
	addText(s, "test://bench/cached", mcp.Cacheable{TTLMs: cachedTTL, CacheScope: "public"})
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: payload}}}, nil, nil
	})
	if delay > 0 {
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "resources/list" {
					time.Sleep(delay)
				}
				return next(ctx, method, req)
			}
		})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	return listenAndServe(addr, h)
}

// addText adds a resource holding payload, read with the given cache hints.
func addText(s *mcp.Server, uri string, hints mcp.Cacheable) {
	s.AddResource(&mcp.Resource{URI: uri, Name: uri[strings.LastIndexByte(uri, '/')+1:], MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Cacheable: hints, Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: payload}}}, nil
		})
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

// serveBare is the floor under a cache hit: a net/http handler that answers
// every POST with the fixed bytes in file (Manifold's own answer to the
// hit, captured by the caller), and does nothing else.
func serveBare(addr, file string) error {
	body, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	contentType := "application/json"
	if !bytes.HasPrefix(body, []byte("{")) {
		contentType = "text/event-stream"
	}
	return listenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(body)
	}))
}

// serveSSE is the floor under an idle listen stream: SSE headers, one
// event, then nothing until the client goes away.
func serveSSE(addr string) error {
	return listenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: message\ndata: {}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
}
