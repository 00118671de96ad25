package router

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// answering is a modern server that answers every read and tool call with
// result, and records the URI of each read it is asked.
func answering(t *testing.T, result string) (url string, asked func() []string) {
	var mu sync.Mutex
	var uris []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		msg, _ := jsonrpc.Decode(body)
		res := result
		switch msg.Method {
		case "server/discover":
			res = modernDiscover
		case "resources/read":
			p, _ := msg.ParamsObject()
			mu.Lock()
			uris = append(uris, p.String("uri"))
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(msg.ID)+`,"result":`+res+`}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), uris...) }
}

// tierless is a router in front of url whose cache has no tier, as
// cache.memory.max_bytes 0 without Redis makes it.
func tierless(t *testing.T, url string) (*Router, *cache.Cache) {
	r := testRouter(t, url, &cache.Options{})
	return r, r.cache
}

// With no cache tier a read is still asked in the spelling that would key
// it, whoever the caller, and counted as passed by the cache.
func TestTierlessReadNormalized(t *testing.T) {
	url, asked := answering(t, `{"contents":[{"uri":"test://doc/x","text":"t"}],"resultType":"complete"}`)
	r, c := tierless(t, url)
	for _, version := range []string{"", mcp.Version20251125} {
		req := request("resources/read", `{"uri":"up+test://DOC/x"}`)
		req.CallerVersion = version
		if _, err := r.Handle(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if got := asked(); len(got) != 2 || got[0] != "test://doc/x" || got[1] != "test://doc/x" {
		t.Errorf("the upstream was asked for %v, want test://doc/x twice", got)
	}
	if n := c.Stats().Upstreams["up"].Bypassed; n != 2 {
		t.Errorf("%d reads counted as passed by the cache, want 2", n)
	}
}

// An upstream's result that is not an object is refused for a legacy
// caller as for a modern one (null taken for an empty object by both, which
// a read may not be: it has no contents), though a legacy caller's answer
// is passed as the upstream sent it.
func TestUnsharedResultMustBeObject(t *testing.T) {
	for _, res := range []string{`[1,2]`, `"s"`, `null`, ` 7`} {
		url, _ := answering(t, res)
		r, _ := tierless(t, url)
		for _, c := range []struct{ method, params string }{
			{"resources/read", `{"uri":"up+test://doc"}`},
			{"tools/call", `{"name":"up_echo","arguments":{}}`},
		} {
			for _, version := range []string{"", mcp.Version20251125} {
				req := request(c.method, c.params)
				req.CallerVersion = version
				got, err := r.Handle(context.Background(), req)
				if res == `null` && c.method != "resources/read" {
					if err != nil || len(got) == 0 || got[0] != '{' {
						t.Errorf("%s answered null, caller %q: got %s, %v; want an object", c.method, version, got, err)
					}
					continue
				}
				var rpcErr *jsonrpc.Error
				if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInternalError {
					t.Errorf("%s answered %s, caller %q: got %s, %v; want -32603", c.method, res, version, got, err)
				}
			}
		}
	}
}
