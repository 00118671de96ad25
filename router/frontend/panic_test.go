package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router"
)

// A panic serving one request is that request's internal error, on the
// stdio frontend as over HTTP: the stream answers the next one.
func TestStdioContainsPanics(t *testing.T) {
	h := router.HandlerFunc(func(_ context.Context, req *mcp.Request) (json.RawMessage, error) {
		if req.Method == "tools/call" {
			var m map[string]int
			m["boom"]++ // a nil map: a bug of the handler's
		}
		return []byte(`{"resultType":"complete"}`), nil
	})
	var logs strings.Builder
	s := NewStdio(NewDispatcher(Options{Handler: h, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), 1<<20, time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	in, feed := io.Pipe()
	out, answers := io.Pipe()
	go func() { _ = s.Serve(context.Background(), in, answers); answers.Close() }()
	lines := bufio.NewScanner(out)
	ask := func(id, method string) string {
		if _, err := io.WriteString(feed, `{"jsonrpc":"2.0","id":`+id+`,"method":"`+method+`","params":{"name":"x",`+meta+`}}`+"\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s", id)
		}
		return lines.Text()
	}
	if a := ask("1", "tools/call"); !strings.Contains(a, `"id":1,"error":{"code":-32603`) {
		t.Errorf("the panicking request answered %s", a)
	}
	if a := ask("2", "prompts/get"); !strings.Contains(a, `"id":2,"result"`) {
		t.Errorf("the next request answered %s", a)
	}
	feed.Close()
}
