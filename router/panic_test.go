package router

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// A held call runs away from its caller's goroutine: a panic in it is the
// caller's error, not the end of the process.
func TestHeldCallPanicIsContained(t *testing.T) {
	hs := newHolds([]byte("secret"), nil)
	req := &mcp.Request{Method: mcp.MethodToolsCall, Params: jsonrpc.Object{}, Meta: jsonrpc.Object{}}
	_, err := hs.start(context.Background(), req, func(context.Context, mcp.Ask) (json.RawMessage, error) {
		var m map[string]int
		m["boom"]++
		return nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "panic") {
		t.Errorf("a panicking held call answered %v", err)
	}
}
