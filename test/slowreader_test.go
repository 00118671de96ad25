package test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A client that reads a large answer slowly but steadily gets all of it:
// the write deadline bounds a stall (a client that stops reading), not the
// whole transfer. Here 6 MB at 256 KiB/s, over a socket whose receive
// buffer is kept small, takes well over the 10 s a write may stall.
func TestSlowSteadyReaderGetsTheWholeAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s transfer: not in -short")
	}
	up := largePageUpstream(t, 140_000)
	url, _ := startManifoldProcess(t, "upstreams:"+httpUpstreamYAML("big", up, "max_response_bytes: 32MiB"))
	small := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: small.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(rpcBody(1, "resources/list", "")))
	req.Header = headers("resources/list", "")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	body, err := io.ReadAll(&pacedReader{r: resp.Body, every: 62500 * time.Microsecond, chunk: 16 << 10})
	var r struct {
		Result struct {
			Resources []json.RawMessage `json:"resources"`
		} `json:"result"`
	}
	if err != nil || json.Unmarshal(body, &r) != nil || len(r.Result.Resources) != 140_000 {
		t.Fatalf("after %v and %d bytes: %v (%d items)", time.Since(start).Round(time.Millisecond), len(body), err, len(r.Result.Resources))
	}
	t.Logf("%d bytes in %v", len(body), time.Since(start).Round(time.Millisecond))
}

// pacedReader reads at most chunk bytes per period of every.
type pacedReader struct {
	r     io.Reader
	every time.Duration
	chunk int
	next  time.Time
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if wait := time.Until(p.next); wait > 0 {
		<-time.After(wait)
	}
	p.next = time.Now().Add(p.every)
	return p.r.Read(b[:min(len(b), p.chunk)])
}
