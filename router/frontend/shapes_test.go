package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router"
)

// planning is a handler that plans every request it is handed a shape for,
// as the router does for a cacheable read: the memo keeps only such.
var planning = router.HandlerFunc(func(_ context.Context, req *mcp.Request) (json.RawMessage, error) {
	if req.Shape != nil && req.Method == "resources/read" {
		req.Shape.SetPlan(req.Method)
	}
	return json.RawMessage(`{}`), nil
})

func serveShaped(t *testing.T, h *HTTP, hd http.Header, body string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	r.Header = hd
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", w.Code, w.Body)
	}
}

func readRequestBody(uri string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"` + uri + `",` + meta + `}}`
}

// Only what the router planned is remembered: a tool call's arguments
// (a password, say) are not kept past their request.
func TestShapesKeepOnlyPlannedRequests(t *testing.T) {
	h := NewHTTP(NewDispatcher(Options{Handler: planning, Plans: true}), nil)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"login","arguments":{"password":"hunter2"},` + meta + `}}`
	serveShaped(t, h, modernHeaders("tools/call", "login"), call)
	serveShaped(t, h, modernHeaders("resources/read", "x://a"), readRequestBody("x://a"))
	h.shapes.mu.RLock()
	defer h.shapes.mu.RUnlock()
	if len(h.shapes.m) != 1 {
		t.Errorf("%d requests remembered, want the read alone", len(h.shapes.m))
	}
	for _, req := range h.shapes.m {
		if bytes.Contains(req.Raw, []byte("hunter2")) {
			t.Errorf("the memo holds a tool call's arguments: %s", req.Raw)
		}
	}
}

// A header a client sets anew on every request (a request id, a tracing
// vendor's context) makes a shape no request repeats: such requests are
// not remembered, so they cannot crowd out the shapes that do repeat.
func TestShapesSkipPerRequestHeaders(t *testing.T) {
	h := NewHTTP(NewDispatcher(Options{Handler: planning, Plans: true}), nil)
	for i, name := range []string{"X-Request-Id", "X-Correlation-Id", "X-Amzn-Trace-Id", "B3", "X-B3-Traceid", "Sentry-Trace", "Uber-Trace-Id", "X-Cloud-Trace-Context", "Traceparent"} {
		hd := modernHeaders("resources/read", "x://a")
		hd.Set(name, fmt.Sprint("v-", i))
		serveShaped(t, h, hd, readRequestBody("x://a"))
	}
	if n := len(h.shapes.m); n != 0 {
		t.Errorf("%d requests with per-request headers remembered, want none", n)
	}
}

// No credential outlives its request in the buffer a shape is written
// out in, and the memo's keys are keyed by a secret of the frontend's: one
// who reads them cannot test guesses of a credential against them.
func TestShapeKeysHoldNoCredential(t *testing.T) {
	hd := modernHeaders("resources/read", "x://a")
	hd.Set("Authorization", "Bearer SUPER-SECRET-TOKEN-123")
	h := NewHTTP(NewDispatcher(Options{Handler: planning, Plans: true}), nil)
	serveShaped(t, h, hd, readRequestBody("x://a"))
	for i := 0; i < 4; i++ { // the pool may hand out another buffer
		b := shapeBufs.Get().(*[]byte)
		if bytes.Contains((*b)[:cap(*b)], []byte("SUPER-SECRET-TOKEN-123")) {
			t.Fatal("the pooled shape buffer still holds the bearer token")
		}
		defer shapeBufs.Put(b)
	}
	key := func(h *HTTP) shapeKey {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		r.Header = hd
		var buf []byte
		k, _, _, ok := h.shapes.of(&buf, r, []byte(readRequestBody("x://a")))
		if !ok {
			t.Fatal("no shape")
		}
		return k
	}
	if key(h) != key(h) {
		t.Fatal("one frontend tells one shape two ways")
	}
	if key(h) == key(NewHTTP(NewDispatcher(Options{Handler: planning, Plans: true}), nil)) {
		t.Error("two frontends key one shape alike: the key is a plain digest of the shape")
	}
}

// A shape too large for the pooled buffer is written out in one of its
// own, sized at once: no outgrown array is left holding part of it.
func TestShapeBufferGrownOnce(t *testing.T) {
	s := newShapes()
	body := readRequestBody("x://a")
	r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	r.Header = modernHeaders("resources/read", "x://a")
	r.Header.Set("Authorization", "Bearer "+strings.Repeat("S", 700))
	r.Header.Set("X-Pad", strings.Repeat("p", 800))
	pooled := make([]byte, 0, 1024)
	orig := pooled[:cap(pooled)]
	buf := &pooled
	if _, _, _, ok := s.of(buf, r, []byte(body)); !ok {
		t.Fatal("no shape")
	}
	if bytes.Contains(orig, []byte("Bearer SSS")) || bytes.Contains(orig, s.secret[:]) {
		t.Error("the outgrown buffer holds part of the shape")
	}
	if b := (*buf)[:cap(*buf)]; bytes.Contains(b, []byte("Bearer SSS")) {
		t.Error("the buffer written in still holds the credential")
	}
}

// A shape is bounded: a read whose body or headers pass 4 KiB is served
// as any other but not remembered, however often it comes.
func TestShapesSkipLargeRequests(t *testing.T) {
	h := NewHTTP(NewDispatcher(Options{Handler: planning, Plans: true}), nil)
	large := modernHeaders("resources/read", "x://a")
	large.Set("X-Pad", strings.Repeat("p", maxShapeBytes))
	padded := strings.Replace(readRequestBody("x://a"), `"uri"`, `"pad":"`+strings.Repeat("p", maxShapeBytes)+`","uri"`, 1)
	for i := 0; i < 3; i++ {
		serveShaped(t, h, large, readRequestBody("x://a"))
		serveShaped(t, h, modernHeaders("resources/read", "x://a"), padded)
	}
	if n := len(h.shapes.m); n != 0 {
		t.Errorf("%d large requests remembered, want none", n)
	}
	serveShaped(t, h, modernHeaders("resources/read", "x://a"), readRequestBody("x://a"))
	if n := len(h.shapes.m); n != 1 {
		t.Errorf("%d requests remembered after a small read, want 1", n)
	}
}

// Without a handler that plans (no cache keeps answers), no read is given
// a shape to plan in and nothing is remembered: the digest of each read
// would be spent for nothing.
func TestNoShapesWithoutPlans(t *testing.T) {
	shaped := 0
	h := NewHTTP(NewDispatcher(Options{Handler: router.HandlerFunc(func(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
		if req.Shape != nil {
			shaped++
		}
		return planning(ctx, req)
	})}), nil)
	for range 3 {
		serveShaped(t, h, modernHeaders("resources/read", "x://a"), readRequestBody("x://a"))
	}
	if shaped != 0 || len(h.shapes.m) != 0 {
		t.Errorf("%d reads handed a shape, %d remembered; want none without Plans", shaped, len(h.shapes.m))
	}
}
