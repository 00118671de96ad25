package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/merge"
	"github.com/manifold-mcp/manifold/upstream"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// sdkUpstream serves, with the go-sdk at 2026-07-28, test://NAME/doc and
// test://shared (both reading "NAME"), and template test://NAME/t/{id}
// whose id "missing" is not found.
func sdkUpstream(t *testing.T, name string) string {
	s := sdk.NewServer(&sdk.Implementation{Name: name, Version: "1"}, nil)
	text := func(uri string) *sdk.ReadResourceResult {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, Text: name}}}
	}
	for _, uri := range []string{"test://" + name + "/doc", "test://shared"} {
		s.AddResource(&sdk.Resource{URI: uri, Name: uri}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return text(uri), nil
		})
	}
	s.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: "test://" + name + "/t/{id}", Name: "t"},
		func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			if strings.HasSuffix(req.Params.URI, "/missing") {
				return nil, sdk.ResourceNotFoundError(req.Params.URI)
			}
			return text(req.Params.URI), nil
		})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// mcpgoLegacy serves, with mcp-go at 2025-11-25 (not-found is -32002),
// test://legacy/doc reading "legacy".
func mcpgoLegacy(t *testing.T) string {
	s := mcpgoserver.NewMCPServer("legacy", "1", mcpgoserver.WithResourceCapabilities(false, false))
	s.AddResource(mcpgo.NewResource("test://legacy/doc", "doc"), func(context.Context, mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: "test://legacy/doc", Text: "legacy"}}, nil
	})
	srv := httptest.NewServer(mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithStreamableHTTPProtocolVersions(mcp.Legacy...)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// oddUpstream is a modern server that answers every read with a JSON-RPC
// error code reserved by the specification for something else.
func oddUpstream(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m jsonrpc.Message
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		if m.Method == mcp.MethodDiscover {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"resources":{}}}}`, m.ID)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"odd"}}`, m.ID)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/mcp"
}

func newRouter(t *testing.T, prefix bool, urls ...string) *Router {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ups []*upstream.Upstream
	for i := 0; i+1 < len(urls); i += 2 {
		u, err := upstream.New(upstream.Options{Name: urls[i], Logger: log, Options: transport.Options{URL: urls[i+1], Timeout: 3 * time.Second, MaxResponseBytes: 1 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = u.Close(context.Background()) })
		ups = append(ups, u)
	}
	return New(Options{Upstreams: upstream.NewRegistry(ups), Namespace: namespace.Namespace{Prefix: prefix}, Codec: merge.NewCodec([]byte("k"), time.Minute), Logger: log})
}

func call(r *Router, method, params string) (json.RawMessage, error) {
	p, err := jsonrpc.ParseObject(json.RawMessage(params))
	if err != nil {
		panic(err)
	}
	return r.Handle(context.Background(), &mcp.Request{Method: method, Params: p, Meta: jsonrpc.Object{}})
}

func readText(t *testing.T, r *Router, uri string) string {
	t.Helper()
	res, err := call(r, mcp.MethodResourcesRead, `{"uri":`+string(jsonrpc.Quote(uri))+`}`)
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	var v struct {
		Contents []struct{ URI, Text string } `json:"contents"`
	}
	if err := json.Unmarshal(res, &v); err != nil || len(v.Contents) != 1 || v.Contents[0].URI != uri {
		t.Fatalf("read %s: %s", uri, res)
	}
	return v.Contents[0].Text
}

// In prefix mode the prefix alone routes a read, to any kind of upstream,
// and the answer names the URI as the caller did.
func TestReadRoutedByPrefix(t *testing.T) {
	r := newRouter(t, true, "alpha", sdkUpstream(t, "alpha"), "beta", sdkUpstream(t, "beta"), "legacy", mcpgoLegacy(t))
	for uri, want := range map[string]string{
		"alpha+test://shared":      "alpha",
		"beta+test://shared":       "beta",
		"beta+test://beta/t/7":     "beta",
		"legacy+test://legacy/doc": "legacy",
	} {
		if got := readText(t, r, uri); got != want {
			t.Errorf("%s read %q, want %q", uri, got, want)
		}
	}
}

// Without namespaces a URI two upstreams serve goes to the first in
// configuration order, whoever answered a listing first; a URI one upstream
// serves is found there, listed or matched by a template.
func TestReadRoutedWithoutNamespace(t *testing.T) {
	r := newRouter(t, false, "alpha", sdkUpstream(t, "alpha"), "beta", sdkUpstream(t, "beta"))
	if _, err := call(r, mcp.MethodResourcesList, `{}`); err != nil {
		t.Fatal(err)
	}
	for uri, want := range map[string]string{"test://shared": "alpha", "test://beta/doc": "beta", "test://beta/t/1": "beta"} {
		if got := readText(t, r, uri); got != want {
			t.Errorf("%s read %q, want %q", uri, got, want)
		}
	}
}

// Every failure reaches the caller as an error legal in 2026-07-28, with the
// code a client can act on, naming the URI or the upstream, never an
// address.
func TestErrorMapping(t *testing.T) {
	down := closedPort(t)
	r := newRouter(t, true, "alpha", sdkUpstream(t, "alpha"), "legacy", mcpgoLegacy(t), "odd", oddUpstream(t), "down", down)
	for _, c := range []struct {
		name, method, params string
		code                 int64
		uri                  string // data.uri
		upstream             string // data.upstream
		message              string // part of the message
	}{
		{"modern not-found", mcp.MethodResourcesRead, `{"uri":"alpha+test://alpha/t/missing"}`, -32602, "alpha+test://alpha/t/missing", "", ""},
		{"legacy -32002", mcp.MethodResourcesRead, `{"uri":"legacy+test://legacy/nope"}`, -32602, "legacy+test://legacy/nope", "", ""},
		{"unknown prefix", mcp.MethodResourcesRead, `{"uri":"nosuch+test://x"}`, -32602, "nosuch+test://x", "", ""},
		{"no prefix", mcp.MethodResourcesRead, `{"uri":"test://x"}`, -32602, "test://x", "", ""},
		{"not a URI", mcp.MethodResourcesRead, `{"uri":"alpha+test://a b"}`, -32602, "alpha+test://a b", "", ""},
		{"uri not a string", mcp.MethodResourcesRead, `{"uri":1}`, -32602, "", "", "params.uri"},
		{"reserved code", mcp.MethodResourcesRead, `{"uri":"odd+test://x"}`, -32603, "", "odd", "upstream odd"},
		{"unreachable", mcp.MethodResourcesRead, `{"uri":"down+test://x"}`, -32603, "", "down", "upstream down unavailable"},
		{"removed method", mcp.MethodInitialize, `{}`, -32601, "", "", "removed"},
		{"unknown method", "foo/bar", `{}`, -32601, "", "", "not supported"},
		{"forged cursor", mcp.MethodResourcesList, `{"cursor":"abc.def"}`, -32602, "", "", "invalid cursor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := call(r, c.method, c.params)
			e, ok := err.(*jsonrpc.Error)
			if !ok {
				t.Fatalf("error %v (%T), want a JSON-RPC error", err, err)
			}
			var data struct{ URI, Upstream string }
			_ = json.Unmarshal(e.Data, &data)
			if e.Code != c.code || data.URI != c.uri || data.Upstream != c.upstream || !strings.Contains(e.Message, c.message) {
				t.Errorf("got %d %q data %s", e.Code, e.Message, e.Data)
			}
			if strings.Contains(e.Message, "127.0.0.1") || strings.Contains(string(e.Data), "127.0.0.1") {
				t.Errorf("an address reached the caller: %q %s", e.Message, e.Data)
			}
		})
	}
}

// legalize keeps the codes a client can act on and turns the others into
// -32603 naming the upstream.
func TestLegalize(t *testing.T) {
	for code, want := range map[int64]int64{
		-32601: -32601, -32602: -32602, -32603: -32603, -32021: -32021,
		-32700: -32603, -32600: -32603, -32020: -32603, -32022: -32603, -32000: -32603, -32099: -32603,
		1: 1, -1: -1, -31999: -31999, -40000: -40000,
	} {
		if got := legalize("up", "tools/call", "", &jsonrpc.Error{Code: code, Message: "m"}); got.Code != want {
			t.Errorf("code %d became %d, want %d", code, got.Code, want)
		}
	}
}

// Without namespaces a URI's owner is relearnt: when the resource moves to
// another upstream, the owner's not-found falls back to the others, and
// the read succeeds (and routes there from then on).
func TestRouteRelearnt(t *testing.T) {
	alpha := sdk.NewServer(&sdk.Implementation{Name: "alpha", Version: "1"}, nil)
	beta := sdk.NewServer(&sdk.Implementation{Name: "beta", Version: "1"}, nil)
	serveAt := func(s *sdk.Server) string {
		srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	add := func(s *sdk.Server, who string) {
		s.AddResource(&sdk.Resource{URI: "test://moving", Name: "moving"}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "test://moving", Text: who}}}, nil
		})
	}
	add(alpha, "alpha")
	r := newRouter(t, false, "alpha", serveAt(alpha), "beta", serveAt(beta))
	if _, err := call(r, mcp.MethodResourcesList, `{}`); err != nil {
		t.Fatal(err)
	}
	if got := readText(t, r, "test://moving"); got != "alpha" {
		t.Fatalf("before the move: %q", got)
	}
	alpha.RemoveResources("test://moving")
	add(beta, "beta")
	for i := 0; i < 2; i++ {
		if got := readText(t, r, "test://moving"); got != "beta" {
			t.Fatalf("read %d after the move: %q", i, got)
		}
	}
}
