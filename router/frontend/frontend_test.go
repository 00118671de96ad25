package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/router"
	"github.com/manifold-mcp/manifold/router/hub"
	"github.com/manifold-mcp/manifold/upstream"
)

const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

func modernHeaders(method, name string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", "2026-07-28")
	h.Set("Mcp-Method", method)
	if name != "" {
		h.Set("Mcp-Name", name)
	}
	return h
}

// The validation order, checked on the wire: each case is one rule broken
// and the code and status the specification gives it.
func TestValidationTable(t *testing.T) {
	echo := router.HandlerFunc(func(_ context.Context, req *mcp.Request) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf(`{"method":%q}`, req.Method)), nil
	})
	srv := httptest.NewServer(NewHTTP(NewDispatcher(Options{Handler: echo}), nil))
	defer srv.Close()
	read := func(params string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{` + params + `}}`
	}
	with := func(h http.Header, k, v string) http.Header {
		c := h.Clone()
		if v == "" {
			c.Del(k)
		} else {
			c.Set(k, v)
		}
		return c
	}
	ok := modernHeaders("resources/read", "x://a")
	for _, c := range []struct {
		name   string
		h      http.Header
		body   string
		status int
		code   int64 // 0: a result
	}{
		{"valid", ok, read(`"uri":"x://a",` + meta), 200, 0},
		{"sentinel-encoded name", with(ok, "Mcp-Name", mcp.EncodeHeader("x://café")), read(`"uri":"x://café",` + meta), 200, 0},
		{"no _meta", ok, read(`"uri":"x://a"`), 400, jsonrpc.CodeInvalidParams},
		{"_meta not an object", ok, read(`"uri":"x://a","_meta":3`), 400, jsonrpc.CodeInvalidParams},
		{"version not a string", ok, read(`"uri":"x://a","_meta":{"io.modelcontextprotocol/protocolVersion":1,"io.modelcontextprotocol/clientCapabilities":{}}`), 400, jsonrpc.CodeInvalidParams},
		{"no client capabilities", ok, read(`"uri":"x://a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`), 400, jsonrpc.CodeInvalidParams},
		{"version header missing", with(ok, "MCP-Protocol-Version", ""), read(`"uri":"x://a",` + meta), 400, jsonrpc.CodeHeaderMismatch},
		{"mismatch beats unsupported", with(ok, "MCP-Protocol-Version", "2025-11-25"), read(`"uri":"x://a",` + strings.Replace(meta, "2026-07-28", "2099-01-01", 1)), 400, jsonrpc.CodeHeaderMismatch},
		{"unsupported version", with(ok, "MCP-Protocol-Version", "2099-01-01"), read(`"uri":"x://a",` + strings.Replace(meta, "2026-07-28", "2099-01-01", 1)), 400, jsonrpc.CodeUnsupportedVersion},
		{"method header mismatch", with(ok, "Mcp-Method", "resources/list"), read(`"uri":"x://a",` + meta), 400, jsonrpc.CodeHeaderMismatch},
		{"name header mismatch", with(ok, "Mcp-Name", "x://b"), read(`"uri":"x://a",` + meta), 400, jsonrpc.CodeHeaderMismatch},
		{"name header missing", with(ok, "Mcp-Name", ""), read(`"uri":"x://a",` + meta), 400, jsonrpc.CodeHeaderMismatch},
		{"name header malformed", with(ok, "Mcp-Name", "=?base64?!!!?="), read(`"uri":"x://a",` + meta), 400, jsonrpc.CodeHeaderMismatch},
		{"uri not a string", ok, read(`"uri":5,` + meta), 400, jsonrpc.CodeInvalidParams},
		{"not JSON", ok, `{"jsonrpc":`, 400, jsonrpc.CodeParseError},
		{"batch", ok, `[` + read(`"uri":"x://a",`+meta) + `]`, 400, jsonrpc.CodeInvalidRequest},
		{"wrong jsonrpc", ok, strings.Replace(read(`"uri":"x://a",`+meta), `"2.0"`, `"1.0"`, 1), 400, jsonrpc.CodeInvalidRequest},
		{"wrong content type", with(ok, "Content-Type", "text/plain"), read(`"uri":"x://a",` + meta), 415, jsonrpc.CodeInvalidRequest},
		{"accepts neither", with(ok, "Accept", "text/html"), read(`"uri":"x://a",` + meta), 406, jsonrpc.CodeInvalidRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, resp := send(t, srv.URL, http.MethodPost, c.h, c.body)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, resp)
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  *jsonrpc.Error  `json:"error"`
			}
			if err := json.Unmarshal(resp, &m); err != nil {
				t.Fatalf("answer %q: %v", resp, err)
			}
			switch {
			case c.code == 0 && m.Result == nil:
				t.Fatalf("want a result, got %s", resp)
			case c.code != 0 && (m.Error == nil || m.Error.Code != c.code):
				t.Fatalf("want error %d, got %s", c.code, resp)
			}
			// Once the envelope is read, the answer carries the request's id.
			if c.status == 200 || c.code == jsonrpc.CodeInvalidParams || c.code == jsonrpc.CodeHeaderMismatch || c.code == jsonrpc.CodeUnsupportedVersion {
				if string(m.ID) != "7" {
					t.Errorf("id %s, want 7", m.ID)
				}
			}
		})
	}
	if status, _ := send(t, srv.URL, http.MethodGet, ok, ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", status)
	}
	notification := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
	if status, _ := send(t, srv.URL, http.MethodPost, modernHeaders("notifications/cancelled", ""), notification); status != http.StatusAccepted {
		t.Errorf("notification: %d, want 202", status)
	}
}

func send(t *testing.T, url, method string, h http.Header, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	if host := h.Get("Host"); host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Each link of the chain answers what it is for, with the status the
// specification gives, before anything below it runs.
func TestChainLinks(t *testing.T) {
	reached := 0
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		if r.Header.Get("X-Panic") != "" {
			panic("boom")
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	a, err := auth.New(auth.Options{BearerTokens: []string{"token-0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := Chain(inner,
		Recover(quiet),
		CheckHost([]string{"gw.example.com"}),
		CheckOrigin([]string{"https://app.example.com"}),
		Authenticate(a, auth.Resource{Endpoint: "/mcp"}, quiet),
		LimitBody(16),
	)
	srv := httptest.NewServer(h)
	defer srv.Close()
	good := http.Header{"Authorization": {"Bearer token-0123456789abcdef"}}
	for _, c := range []struct {
		name    string
		set     map[string]string
		body    string
		status  int
		reached bool
	}{
		{"admitted", nil, "small", 204, true},
		{"allowed host", map[string]string{"Host": "gw.example.com:443"}, "", 204, true},
		{"rebinding host", map[string]string{"Host": "evil.example.com"}, "", 403, false},
		{"foreign origin", map[string]string{"Origin": "https://evil.example.com"}, "", 403, false},
		{"allowed origin", map[string]string{"Origin": "https://app.example.com"}, "", 204, true},
		{"loopback origin", map[string]string{"Origin": "http://localhost:3000"}, "", 204, true},
		{"no token", map[string]string{"Authorization": ""}, "", 401, false},
		{"wrong token", map[string]string{"Authorization": "Bearer token-0123456789abcdeX"}, "", 401, false},
		{"body over the limit", nil, strings.Repeat("x", 17), 413, true},
		{"panic", map[string]string{"X-Panic": "1"}, "", 500, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := good.Clone()
			for k, v := range c.set {
				if v == "" {
					h.Del(k)
				} else {
					h.Set(k, v)
				}
			}
			before := reached
			status, body := send(t, srv.URL, http.MethodPost, h, c.body)
			if status != c.status {
				t.Fatalf("status %d, want %d (%s)", status, c.status, body)
			}
			if (reached > before) != c.reached {
				t.Errorf("handler reached: %v, want %v", reached > before, c.reached)
			}
			if status == 401 && !strings.Contains(string(body), "unauthorized") {
				t.Errorf("401 body %s", body)
			}
		})
	}
}

// Progress the upstream sends while serving a request reaches a caller that
// asked for it (a progressToken) on an SSE response, in order and before the
// result; a caller that did not ask, or accepts only JSON, gets the result
// alone.
func TestProgressBeforeResult(t *testing.T) {
	h := router.HandlerFunc(func(_ context.Context, req *mcp.Request) (json.RawMessage, error) {
		if req.Notify == nil { // the caller asked for nothing to be passed on
			return json.RawMessage(`{"done":true}`), nil
		}
		for i := 1; i <= 3; i++ {
			req.Notify(&jsonrpc.Message{JSONRPC: "2.0", Method: mcp.NotifyProgress, Params: json.RawMessage(fmt.Sprintf(`{"progressToken":"p","progress":%d}`, i))})
		}
		req.Notify(&jsonrpc.Message{JSONRPC: "2.0", Method: "notifications/other"})
		return json.RawMessage(`{"done":true}`), nil
	})
	srv := httptest.NewServer(NewHTTP(NewDispatcher(Options{Handler: h}), nil))
	defer srv.Close()
	body := func(withToken bool) string {
		m := meta
		if withToken {
			m = strings.Replace(meta, `"_meta":{`, `"_meta":{"progressToken":"p",`, 1)
		}
		return `{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{` + m + `}}`
	}
	hdr := modernHeaders("resources/list", "")
	status, b := send(t, srv.URL, http.MethodPost, hdr, body(true))
	var data []string
	for _, line := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	if status != 200 || len(data) != 4 {
		t.Fatalf("HTTP %d, events %q", status, data)
	}
	for i := 0; i < 3; i++ {
		if !strings.Contains(data[i], fmt.Sprintf(`"progress":%d`, i+1)) {
			t.Errorf("event %d: %s", i, data[i])
		}
	}
	if !strings.Contains(data[3], `"result":{"done":true}`) {
		t.Errorf("last event %s", data[3])
	}
	for _, c := range []struct {
		name   string
		accept string
		token  bool
	}{{"no token", "application/json, text/event-stream", false}, {"JSON only", "application/json", true}} {
		h := hdr.Clone()
		h.Set("Accept", c.accept)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body(c.token)))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" || !strings.Contains(string(rb), `"done":true`) {
			t.Errorf("%s: %s %s", c.name, ct, rb)
		}
	}
}

// readUntil reads lines from r until what it read contains each of wants,
// and returns it.
func readUntil(t *testing.T, r *bufio.Reader, wants ...string) string {
	t.Helper()
	var seen strings.Builder
	for _, want := range wants {
		for !strings.Contains(seen.String(), want) {
			line, err := r.ReadString('\n')
			seen.WriteString(line)
			if err != nil {
				t.Fatalf("the stream ended (%v) before %q:\n%s", err, want, seen.String())
			}
		}
	}
	return seen.String()
}

// A listen is acknowledged with its own id and the part of the filter that
// can be honoured (here the list, which a reload may change, but no URI:
// no upstream serves it), then ended by a shutdown with
// the graceful-closure result. A listen that accepts no SSE is refused.
func TestListenFraming(t *testing.T) {
	h := hub.New(hub.Options{Upstreams: upstream.NewRegistry(nil), Namespace: namespace.Namespace{Prefix: true}})
	srv := httptest.NewServer(NewHTTP(NewDispatcher(Options{Handler: router.HandlerFunc(nil), Hub: h, KeepAlive: 50 * time.Millisecond}), nil))
	defer srv.Close()
	body := `{"jsonrpc":"2.0","id":"sub-1","method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true,"resourceSubscriptions":["a+x://y"]},` + meta + `}}`
	jsonOnly := modernHeaders("subscriptions/listen", "")
	jsonOnly.Set("Accept", "application/json")
	if status, _ := send(t, srv.URL, http.MethodPost, jsonOnly, body); status != http.StatusNotAcceptable {
		t.Errorf("listen without SSE: %d, want 406", status)
	}
	bad := strings.Replace(body, `"notifications":{`, `"notifications":3,"x":{`, 1)
	if status, b := send(t, srv.URL, http.MethodPost, modernHeaders("subscriptions/listen", ""), bad); status != 400 || !strings.Contains(string(b), "-32602") {
		t.Errorf("bad filter: %d %s", status, b)
	}
	reqCtx, cancelReq := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelReq()
	req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, srv.URL, strings.NewReader(body))
	req.Header = modernHeaders("subscriptions/listen", "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The hub is shut down once the ack and a keep-alive have come.
	lines := bufio.NewReader(resp.Body)
	seen := readUntil(t, lines, "subscriptions/acknowledged", ": keep-alive")
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- h.Close(ctx)
	}()
	rest, _ := io.ReadAll(lines)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	b := seen + string(rest)
	ack := `"method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"sub-1"},"notifications":{"resourcesListChanged":true}}`
	if !strings.Contains(b, ack) {
		t.Errorf("no acknowledgment honouring the list only, tagged sub-1:\n%s", b)
	}
	if !strings.Contains(b, ": keep-alive") {
		t.Errorf("no keep-alive on a quiet stream:\n%s", b)
	}
	if !strings.Contains(b, `"id":"sub-1","result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":"sub-1"}}`) {
		t.Errorf("no graceful closure:\n%s", b)
	}
}
