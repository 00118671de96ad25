package test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkHandlerMemoryHit is a memory-tier hit served by Manifold's
// whole HTTP handler (its chain, frontend, router and cache) with no
// socket in between, beside a bare handler that reads the body and writes
// the same answer, both into a recorder: what Manifold itself costs per
// hit, without the kernel and the load generator that make the
// cross-process figures noisy on a shared machine.
func BenchmarkHandlerMemoryHit(b *testing.B) {
	up, _ := hintedUpstream(b)
	uri := "h+test://doc"
	h := headers("resources/read", uri)
	body := []byte(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	p := startProxy(b, "upstreams:"+httpUpstreamYAML("h", up.URL))
	serve := func(hd http.Handler) []byte { return serveRecorded(b, hd, h, body) }
	serve(p.handler) // fills the cache
	answer := bytes.Clone(serve(p.handler))
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	for _, tg := range []struct {
		name string
		h    http.Handler
	}{{"bare-handler", bare}, {"manifold-handler", p.handler}} {
		b.Run(tg.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				serve(tg.h)
			}
		})
	}
}

// serveRecorded is hd's answer to a POST of body with headers h, into a
// recorder, as the listener would hand it (the Host the checks admit);
// anything but HTTP 200 fails tb.
func serveRecorded(tb testing.TB, hd http.Handler, h http.Header, body []byte) []byte {
	req := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
	req.Host = "127.0.0.1"
	req.Header = h.Clone()
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}
