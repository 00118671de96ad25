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

// A cursor continues the listing of the view that handed it out, and no
// other: another endpoint's view, or the main endpoint, refuses it as a
// cursor it never issued.
func TestCursorBoundToItsView(t *testing.T) {
	m := &Merger{Codec: NewCodec([]byte("secret"), time.Hour), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f := FetcherFunc(func(_ context.Context, _ string, req *mcp.Request) (json.RawMessage, error) {
		if req.Params.String("cursor") == "" {
			return json.RawMessage(`{"resultType":"complete","ttlMs":1000,"cacheScope":"public","tools":[{"name":"a"}],"nextCursor":"p2"}`), nil
		}
		return json.RawMessage(`{"resultType":"complete","ttlMs":1000,"cacheScope":"public","tools":[{"name":"b"}]}`), nil
	})
	list := func(view, cursor string) (*Result, error) {
		req := &mcp.Request{Method: mcp.MethodToolsList, Params: jsonrpc.Object{}, Meta: jsonrpc.Object{}}
		if cursor != "" {
			req.Params["cursor"] = jsonrpc.Quote(cursor)
		}
		return m.ListIn(context.Background(), view, req, []string{"u"}, f, nil)
	}
	first, err := list("/mcp/dev", "")
	if err != nil || first.NextCursor == "" {
		t.Fatalf("first page: %v %+v", err, first)
	}
	if next, err := list("/mcp/dev", first.NextCursor); err != nil || string(next.AppendItems(nil)) != `[{"name":"b"}]` {
		t.Errorf("the view's own cursor: %v %+v", err, next)
	}
	for _, other := range []string{"/mcp/ops", ""} {
		if _, err := list(other, first.NextCursor); !errors.Is(err, ErrBadCursor) {
			t.Errorf("view %q took /mcp/dev's cursor: %v", other, err)
		}
	}
}
