package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/cmd/manifold/process"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/sse"
)

// Upstream fixtures. Each one is a real MCP server from an independent
// implementation; the resources they expose are generated from a name so a
// test can predict exactly what Manifold must return.

// sdkOptions shape a go-sdk fixture.
type sdkOptions struct {
	resources int    // test://NAME/0 .. test://NAME/(n-1)
	pageSize  int    // resources/list page size (0: the SDK's default)
	ttlMs     int    // cache hint on every result
	scope     string // cacheScope on every result ("" = SDK default, public)
	// completions, if set, completes any argument with "NAME-alice" and
	// "NAME-bob", those starting with the value typed, and reports the
	// ref it was asked about as the third value.
	completions string
}

// newSDKServer builds a go-sdk server named name with:
//   - resources test://NAME/i (text "NAME resource i", with annotations,
//     icons and _meta that must survive the proxy),
//   - test://shared (text "shared from NAME"), for collisions,
//   - template test://NAME/items/{id} (text "NAME item ID"; id "missing" is
//     not found),
//   - test://NAME/secret, whose text is the Authorization header it received.
func newSDKServer(name string, o sdkOptions) *mcp.Server {
	opts := &mcp.ServerOptions{
		PageSize: o.pageSize,
		// Subscriptions are accepted (and so advertised); the SDK tracks them.
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	}
	if n := o.completions; n != "" {
		opts.CompletionHandler = func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			var vals []string
			for _, v := range []string{n + "-alice", n + "-bob"} {
				if strings.HasPrefix(v, req.Params.Argument.Value) {
					vals = append(vals, v)
				}
			}
			ref := req.Params.Ref
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: append(vals, "ref="+ref.Name+ref.URI)}}, nil
		}
	}
	if o.ttlMs > 0 || o.scope != "" {
		opts.SetCacheable = func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.TTLMs, c.CacheScope = o.ttlMs, o.scope
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "sdk-" + name, Version: "1.0.0"}, opts)
	text := func(uri, body string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: body}}}
	}
	for i := 0; i < o.resources; i++ {
		uri := fmt.Sprintf("test://%s/%d", name, i)
		body := fmt.Sprintf("%s resource %d", name, i)
		s.AddResource(&mcp.Resource{
			URI: uri, Name: fmt.Sprintf("%s-%d", name, i), Title: "Resource " + body, MIMEType: "text/plain",
			Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.5},
			Icons:       []mcp.Icon{{Source: "https://example.com/" + name + ".png", MIMEType: "image/png"}},
			Meta:        mcp.Meta{"example.com/origin": name},
		}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return text(uri, body), nil
		})
	}
	s.AddResource(&mcp.Resource{URI: "test://shared", Name: "shared", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return text("test://shared", "shared from "+name), nil
		})
	s.AddResource(&mcp.Resource{URI: "test://" + name + "/secret", Name: "secret", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			auth := ""
			if req.Extra != nil && req.Extra.Header != nil {
				auth = req.Extra.Header.Get("Authorization")
			}
			return text(req.Params.URI, "auth="+auth), nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://" + name + "/items/{id}", Name: name + "-item", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			id := strings.TrimPrefix(req.Params.URI, "test://"+name+"/items/")
			if id == "missing" {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			return text(req.Params.URI, name+" item "+id), nil
		})
	return s
}

// counter counts the JSON-RPC methods an HTTP upstream receives, and each
// method with its params.uri ("resources/read test://x").
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

func (c *counter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			var m struct {
				Method string `json:"method"`
				Params struct {
					URI string `json:"uri"`
				} `json:"params"`
			}
			_ = json.Unmarshal(b, &m)
			c.mu.Lock()
			c.n[m.Method]++
			if m.Params.URI != "" {
				c.n[m.Method+" "+m.Params.URI]++
			}
			c.mu.Unlock()
		} else {
			c.mu.Lock()
			c.n[r.Method]++
			c.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// httpUpstream is a fixture served over HTTP.
type httpUpstream struct {
	URL   string
	Calls *counter
	srv   *httptest.Server
}

func serveHTTP(t testing.TB, h http.Handler) *httpUpstream {
	t.Helper()
	c := &counter{n: map[string]int{}}
	srv := httptest.NewServer(c.wrap(h))
	t.Cleanup(srv.Close)
	return &httpUpstream{URL: srv.URL + "/mcp", Calls: c, srv: srv}
}

// modernSDK serves s statelessly: the 2026-07-28 era (and legacy requests
// without sessions).
func modernSDK(t testing.TB, s *mcp.Server) *httpUpstream {
	return serveHTTP(t, modernHandler(s))
}

func modernHandler(s *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
}

// legacySDK serves s with sessions: 2025-11-25 and older only.
func legacySDK(t testing.TB, s *mcp.Server) *httpUpstream {
	return serveHTTP(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
}

// mcpgoLegacy is an mcp-go server that speaks only the legacy revisions,
// era-faithfully: an unknown resource is -32002 and results carry no cache
// hints. It lists test://NAME/0 .. n-1 and test://shared.
func mcpgoLegacy(t testing.TB, name string, n int) *httpUpstream {
	t.Helper()
	s := mcpgoserver.NewMCPServer("mcpgo-"+name, "1.0.0", mcpgoserver.WithResourceCapabilities(true, true))
	add := func(uri, body string) {
		s.AddResource(mcpgo.NewResource(uri, strings.TrimPrefix(uri, "test://"), mcpgo.WithMIMEType("text/plain")),
			func(context.Context, mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
				return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: uri, MIMEType: "text/plain", Text: body}}, nil
			})
	}
	for i := 0; i < n; i++ {
		add(fmt.Sprintf("test://%s/%d", name, i), fmt.Sprintf("%s resource %d", name, i))
	}
	add("test://shared", "shared from "+name)
	h := mcpgoserver.NewStreamableHTTPServer(s, mcpgoserver.WithStreamableHTTPProtocolVersions("2025-11-25", "2025-06-18", "2025-03-26"))
	return serveHTTP(t, h)
}

// The stdio child: the test binary re-executed with childEnv set runs a
// go-sdk server on stdin/stdout instead of the tests.
const childEnv = "MANIFOLD_TEST_CHILD"

// childUpstream is the YAML of a stdio upstream running a child of kind.
func childUpstream(name, kind string) string {
	return fmt.Sprintf(`
  - name: %s
    command: [%q, "-test.run=^$"]
    env: {%s: %q}
`, name, os.Args[0], childEnv, kind)
}

// httpUpstreamYAML is the YAML of an HTTP upstream; extra lines are indented
// under it.
func httpUpstreamYAML(name, url string, extra ...string) string {
	s := fmt.Sprintf("\n  - name: %s\n    url: %s\n", name, url)
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// runChild runs the stdio server named by kind:
//   - "sdk:NAME": newSDKServer(NAME) with 3 resources, plus test://NAME/pid
//     whose text is the process id (so a test can kill it), and
//     test://NAME/tick, announced as updated every 200 ms, and
//     test://NAME/progress/X, which reports progress naming X;
//   - "sdk-legacy-notfound:NAME": the same, but not-found is the legacy -32002;
//   - "sdk-asks:NAME": askingServer(NAME);
//   - "sdk-cached:NAME": cachedToolServer, with read-only tools;
//   - "mcpgo-cached:NAME": mcpgoCachedServer, the same in mcp-go;
//   - "environ:NAME": a server whose test://NAME/environ is its environment;
//   - "bare:ADDR": the benchmarks' reference HTTP server (see runBare).
func runChild(kind string) int {
	variant, name, _ := strings.Cut(kind, ":")
	if variant == "bare" {
		return runBare(name)
	}
	if variant == "environ" {
		return runEnvironChild(name)
	}
	if variant == "sdk-tools" {
		return runStdio(sdkToolServer(name, sdkOptions{resources: 3}))
	}
	if variant == "sdk-cached" {
		return runCachedToolsChild()
	}
	if variant == "mcpgo-cached" {
		return runMcpgoCachedChild()
	}
	if variant == "sdk-asks" {
		return runStdio(askingServer(name))
	}
	if variant == "crashy" {
		return runCrashy(name)
	}
	if variant == "sdk-legacy-notfound" {
		mcp.CodeResourceNotFound = -32002 //nolint:staticcheck // the legacy code, on purpose
	}
	s := newSDKServer(name, sdkOptions{resources: 3})
	pid := fmt.Sprint(os.Getpid())
	s.AddResource(&mcp.Resource{URI: "test://" + name + "/pid", Name: "pid"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://" + name + "/pid", Text: pid}}}, nil
		})
	// test://NAME/progress/X reports progress three times, naming X, with
	// the caller's token, then answers.
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://" + name + "/progress/{x}", Name: "progress"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			for i := 1; i <= 3; i++ {
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3, Message: req.Params.URI})
				}
				time.Sleep(20 * time.Millisecond) // the progress is spread in time, ahead of the answer
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "done"}}}, nil
		})
	tick := "test://" + name + "/tick"
	s.AddResource(&mcp.Resource{URI: tick, Name: "tick"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: tick, Text: time.Now().String()}}}, nil
		})
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			_ = s.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: tick})
		}
	}()
	fmt.Fprintf(os.Stderr, "child %s ready, pid %s\n", kind, pid)
	return runStdio(s)
}

func runStdio(s *mcp.Server) int {
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// runBare serves, on addr, every POST with the bytes of the file named by
// MANIFOLD_BARE_BODY, after reading the request: the least an HTTP JSON-RPC
// server can do, the reference a cache hit is measured against
// (scripts/bench-wrk). With MANIFOLD_BARE_GUARDED=1 it keeps the bounds
// Manifold's listener keeps (process.Bounded at the default read_timeout,
// and a write deadline on each answer, as router/frontend sets one): what
// a server answering as cheaply as possible pays for not being held open
// by a slow or silent client, the floor under a hit that no handler
// removes.
func runBare(addr string) int {
	body, err := os.ReadFile(os.Getenv("MANIFOLD_BARE_BODY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	guarded := os.Getenv("MANIFOLD_BARE_GUARDED") == "1"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if guarded {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(sse.WriteTimeout))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	srv := &http.Server{Handler: h}
	if guarded {
		defaults, problems := config.Parse([]byte("upstreams: [{name: bare, url: \"http://127.0.0.1:1\"}]"), nil)
		if problems != nil {
			fmt.Fprintln(os.Stderr, problems)
			return 1
		}
		srv = process.Bounded(h, defaults.ReadTimeout)
	}
	srv.Addr = addr
	err = srv.ListenAndServe()
	fmt.Fprintln(os.Stderr, err)
	return 1
}
