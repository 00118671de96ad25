package merge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// A merged page is cached by whoever reads it as its strictest part says:
// it stays fresh only as long as the shortest-lived of its pages (a page
// with ttlMs 0, or none, or an upstream that failed, makes it 0: nothing
// to store), and it is private if any of its pages is not exactly public.
func TestMergedHintsAreTheStrictest(t *testing.T) {
	m := &Merger{Codec: NewCodec([]byte("secret"), time.Hour), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, c := range []struct {
		name  string
		pages map[string]string // upstream → its page's hints; "fail", "none": no answer, no list
		ttl   int64
		scope string
	}{
		{"shortest of three", map[string]string{"a": `"ttlMs":5000,"cacheScope":"public"`, "b": `"ttlMs":2000,"cacheScope":"public"`, "c": `"ttlMs":60000,"cacheScope":"public"`}, 2000, "public"},
		{"shortest first", map[string]string{"a": `"ttlMs":1500,"cacheScope":"public"`, "b": `"ttlMs":9000,"cacheScope":"public"`, "c": `"ttlMs":4000,"cacheScope":"public"`}, 1500, "public"},
		{"one says 0", map[string]string{"a": `"ttlMs":60000,"cacheScope":"public"`, "b": `"ttlMs":0,"cacheScope":"public"`, "c": `"ttlMs":30000,"cacheScope":"public"`}, 0, "public"},
		{"one says nothing", map[string]string{"a": `"ttlMs":60000,"cacheScope":"public"`, "b": `"cacheScope":"public"`, "c": `"ttlMs":30000,"cacheScope":"public"`}, 0, "public"},
		{"one fails", map[string]string{"a": `"ttlMs":60000,"cacheScope":"public"`, "b": "fail", "c": `"ttlMs":30000,"cacheScope":"public"`}, 0, "public"},
		{"one has no such list", map[string]string{"a": `"ttlMs":60000,"cacheScope":"public"`, "b": "none", "c": `"ttlMs":30000,"cacheScope":"public"`}, 30000, "public"},
		{"one private", map[string]string{"a": `"ttlMs":60000,"cacheScope":"public"`, "b": `"ttlMs":60000,"cacheScope":"private"`, "c": `"ttlMs":60000,"cacheScope":"public"`}, 60000, "private"},
		{"one without a scope", map[string]string{"a": `"ttlMs":60000,"cacheScope":"public"`, "b": `"ttlMs":60000`, "c": `"ttlMs":60000,"cacheScope":"public"`}, 60000, "private"},
		{"one mis-cased", map[string]string{"a": `"ttlMs":60000,"cacheScope":"public"`, "b": `"ttlMs":60000,"cacheScope":"Public"`, "c": `"ttlMs":60000,"cacheScope":"public"`}, 60000, "private"},
	} {
		f := FetcherFunc(func(_ context.Context, name string, _ *mcp.Request) (json.RawMessage, error) {
			switch hints := c.pages[name]; hints {
			case "fail":
				return nil, errors.New("connection refused")
			case "none":
				return nil, ErrNoList
			default:
				return json.RawMessage(`{"resultType":"complete",` + hints + `,"tools":[{"name":"` + name + `_t"}]}`), nil
			}
		})
		req := &mcp.Request{Method: mcp.MethodToolsList, Params: jsonrpc.Object{}, Meta: jsonrpc.Object{}}
		res, err := m.List(context.Background(), req, []string{"a", "b", "c"}, f, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.TTLms != c.ttl || res.Scope != c.scope {
			t.Errorf("%s: merged page says ttlMs %d, cacheScope %q; want %d, %q", c.name, res.TTLms, res.Scope, c.ttl, c.scope)
		}
	}
}
