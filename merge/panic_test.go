package merge

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// Each upstream's page is fetched on a goroutine apart (a worker): a panic there
// leaves that upstream out of the page, like any failure, and the others
// are served.
func TestPanickingPageIsContained(t *testing.T) {
	m := &Merger{Codec: NewCodec([]byte("secret"), time.Hour), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f := FetcherFunc(func(_ context.Context, upstream string, _ *mcp.Request) (json.RawMessage, error) {
		if upstream == "bad" {
			var p map[string]int
			p["boom"]++
		}
		return json.RawMessage(`{"resultType":"complete","ttlMs":1000,"cacheScope":"public","resources":[{"uri":"good://x","name":"x"}]}`), nil
	})
	req := &mcp.Request{Method: mcp.MethodResourcesList, Params: jsonrpc.Object{}, Meta: jsonrpc.Object{}}
	res, err := m.List(context.Background(), req, []string{"bad", "good"}, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if items := string(res.AppendItems(nil)); !strings.Contains(items, "good://x") || res.TTLms != 0 {
		t.Errorf("page %s, ttlMs %d", items, res.TTLms)
	}
}
