package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// largePageUpstream answers resources/list with one page of n items (about
// 42 bytes each), private, and everything else as a modern server must.
func largePageUpstream(t testing.TB, n int) string {
	var page bytes.Buffer
	page.WriteString(`{"resultType":"complete","ttlMs":60000,"cacheScope":"private","resources":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			page.WriteByte(',')
		}
		fmt.Fprintf(&page, `{"uri":"test://big/%07d","name":"r%07d"}`, i, i)
	}
	page.WriteString(`]}`)
	body := page.Bytes()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		switch m.Method {
		case "server/discover":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"resources":{}}}}`, m.ID)
		case "resources/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":`, m.ID)
			_, _ = w.Write(body)
			_, _ = w.Write([]byte("}"))
		default:
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// startManifoldProcess runs the manifold binary on cfg and returns its URL
// and process id.
func startManifoldProcess(t testing.TB, yamlText string) (string, int) {
	port := freePort(t)
	path := writeConfig(t, fmt.Sprintf("listen: 127.0.0.1:%d\nlog: {level: warn}\n", port)+yamlText)
	cmd := exec.Command(manifoldBin, "serve", "--config", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	return url + "/mcp", cmd.Process.Pid
}

// peakRSS is a process's high-water mark of resident memory.
func peakRSS(t testing.TB, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// Four concurrent callers (each its own credential) list one 15 MB upstream
// page of 350,000 items: Manifold answers each whole and its peak resident
// memory stays under 256 MB. (The upstream's call timeout is raised: on a
// loaded 2-core machine four such pages take over the default 30 s, and a
// call cut by its timeout is not what this test is about.)
func TestLargeListPagesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("large pages: not in -short")
	}
	up := largePageUpstream(t, 350_000)
	url, pid := startManifoldProcess(t, "upstreams:"+httpUpstreamYAML("big", up, "max_response_bytes: 32MiB", "forward_headers: [Authorization]", "timeout: 2m"))
	base := peakRSS(t, pid)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := headers("resources/list", "")
			h.Set("Authorization", fmt.Sprintf("Bearer caller-%d", i))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(rpcBody(1, "resources/list", "")))
			req.Header = h
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var r struct {
				Result struct {
					Resources []json.RawMessage `json:"resources"`
				} `json:"result"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Result.Resources) != 350_000 {
				errs <- fmt.Errorf("caller %d: %d items, %v", i, len(r.Result.Resources), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	peak := peakRSS(t, pid)
	t.Logf("4 × 15 MB pages in %v; peak RSS %d MB (at start %d MB)", time.Since(start).Round(time.Millisecond), peak>>20, base>>20)
	if peak > 256<<20 {
		t.Errorf("peak RSS %d MB, want under 256 MB", peak>>20)
	}
}

// One listen may name at most subscriptions.max_uris_per_stream URIs, each
// at most 8 KiB, and one upstream is asked to watch at most ten times as
// many in all: beyond, -32602 naming the key.
// Twelve listens of 40,000 URIs are refused without growing Manifold's
// memory or reaching the upstream.
func TestListenBounds(t *testing.T) {
	s := newSDKServer("a", sdkOptions{resources: 1})
	up, lt := trackedModern(t, s)
	url, pid := startManifoldProcess(t, "max_request_bytes: 4MiB\nsubscriptions: {max_uris_per_stream: 100}\nupstreams:"+httpUpstreamYAML("a", up.URL))
	readText(t, url, "a+test://a/0")
	uris := func(n, from int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"a+test://a/%d"`, from+i)
		}
		return b.String()
	}
	listenRaw := func(filter string) *rawResponse {
		return post(t, url, headers("subscriptions/listen", ""), `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":`+filter+`,`+metaOK+`}}`)
	}
	base := peakRSS(t, pid)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := listenRaw(`{"resourceSubscriptions":[` + uris(40_000, i*40_000) + `]}`)
			if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "subscriptions.max_uris_per_stream") {
				t.Errorf("a listen of 40,000 URIs: HTTP %d %s", r.Status, r.Body[:min(len(r.Body), 200)])
			}
		}()
	}
	wg.Wait()
	if peak := peakRSS(t, pid); peak-base > 64<<20 {
		t.Errorf("refusing 12 listens of 40,000 URIs grew peak RSS by %d MB", (peak-base)>>20)
	}
	if lt.opened.Load() != 1 { // the list-change watch only
		t.Errorf("the upstream was asked for %d listen streams", lt.opened.Load())
	}
	long := listenRaw(`{"resourceSubscriptions":["a+test://a/` + strings.Repeat("x", 9000) + `"]}`)
	long.wantError(t, 400, -32602)
	for i := range 10 {
		listen(t, url, 2+i, `{"resourceSubscriptions":[`+uris(100, i*100)+`]}`).next(t, 5*time.Second)
	}
	over := listenRaw(`{"resourceSubscriptions":[` + uris(100, 1000) + `]}`)
	if over.Error == nil || over.Error.Code != -32602 || !strings.Contains(over.Error.Message, "would watch more than 1000 resources") || !strings.Contains(over.Error.Message, "subscriptions.max_uris_per_stream") {
		t.Errorf("a listen past ten times max_uris_per_stream: %s", over.Body)
	}
}

// Subscribers hold what they name, whether or not they read:
// subscriptions.max_bytes bounds what all of them may hold together. Fifty
// listens of 100 URIs of 8 KiB, from clients that never read their stream,
// are admitted while the bound allows, and the rest are refused with an
// error that names it; Manifold's memory grows by a bounded amount.
func TestListenMemoryBounded(t *testing.T) {
	s := newSDKServer("a", sdkOptions{resources: 1})
	up, _ := trackedModern(t, s)
	url, pid := startManifoldProcess(t, "max_request_bytes: 4MiB\nsubscriptions: {max_bytes: 8MiB, max_uris_per_stream: 100}\nupstreams:"+httpUpstreamYAML("a", up.URL))
	readText(t, url, "a+test://a/0")
	base := peakRSS(t, pid)
	refused := 0
	var refusal string
	for i := 0; i < 50; i++ {
		var b strings.Builder
		for j := 0; j < 100; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"a+test://a/%d-%d-%s"`, i, j, strings.Repeat("x", 8000))
		}
		if accepted, start := listenWithoutReading(t, url, `{"resourceSubscriptions":[`+b.String()+`]}`); !accepted {
			refused++
			refusal = start
		}
	}
	growth := peakRSS(t, pid) - base
	t.Logf("50 listens of 800 KB each: %d refused; peak RSS grew %d MB", refused, growth>>20)
	if refused < 40 || !strings.Contains(refusal, "subscriptions.max_bytes") {
		t.Errorf("%d of 50 refused, the last saying %s", refused, refusal)
	}
	if growth > 64<<20 {
		t.Errorf("peak RSS grew by %d MB", growth>>20)
	}
}

// listenWithoutReading opens a listen and reads the first bytes of its
// answer, whether the acknowledgment of a stream (accepted: true) or an
// error, never the rest of the stream; the connection stays open until the
// test ends.
func listenWithoutReading(t *testing.T, url, filter string) (accepted bool, start string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":` + filter + `,` + metaOK + `}}`
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header = headers("subscriptions/listen", "")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 512)
	n, _ := io.ReadAtLeast(resp.Body, b, 200)
	start = string(b[:n])
	return strings.Contains(start, "notifications/subscriptions/acknowledged"), start
}
