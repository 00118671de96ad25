package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/manifold-mcp/manifold/internal/h1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counted is an httptest server that counts the connections it accepted.
func counted(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &n
}

func client(t *testing.T, tr *h1.Transport) *http.Client {
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"method":%q,"body":%q}`, r.Method, b)
}

func post(t *testing.T, c *http.Client, url, body string) string {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	_, b := read(t, resp, err)
	return b
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	return read(t, resp, err)
}

// read is the body of an exchange that must have succeeded, read whole.
func read(t *testing.T, resp *http.Response, err error) (*http.Response, string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestSequentialExchangesShareOneConnection(t *testing.T) {
	s, conns := counted(t, http.HandlerFunc(echo))
	c := client(t, &h1.Transport{})
	for i := range 50 {
		want := fmt.Sprintf(`{"method":"POST","body":"call %d"}`, i)
		if got := post(t, c, s.URL, fmt.Sprintf("call %d", i)); got != want {
			t.Fatalf("answer %d = %s, want %s", i, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("50 exchanges one after another opened %d connections, want 1", n)
	}
}

// A caller that reads exactly Content-Length bytes and closes, as
// Manifold's upstream client does, never asks past the end: the read of
// the last bytes must report the end with them, or the connection is lost.
func TestExactReadThenCloseReuses(t *testing.T) {
	s, conns := counted(t, http.HandlerFunc(echo))
	c := client(t, &h1.Transport{})
	for range 10 {
		resp, err := c.Post(s.URL, "application/json", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, resp.ContentLength)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("10 exact reads opened %d connections, want 1", n)
	}
}

// A chunked body read to its last data byte but not past it has seen the
// end (the last chunk is read with it): the connection is reused.
func TestCloseBeforeLastChunkReuses(t *testing.T) {
	url, conns := rawServer(t, func(int, *http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false
	})
	c := client(t, &h1.Transport{})
	for range 5 {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != "hello" {
			t.Fatalf("body %q, %v", b, err)
		}
		resp.Body.Close()
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("opened %d connections, want 1", n)
	}
}

func TestConcurrentExchanges(t *testing.T) {
	s, conns := counted(t, http.HandlerFunc(echo))
	c := client(t, &h1.Transport{MaxIdle: 8})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				body := fmt.Sprintf("%d/%d", g, i)
				resp, err := c.Post(s.URL, "text/plain", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf(`{"method":"POST","body":%q}`, body); err != nil || string(b) != want {
					errs <- fmt.Errorf("answer %s, %v; want %s", b, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// 16 callers at once need at most 16 connections; 8 stay idle between
	// rounds, so a few more may open, never one per exchange.
	if n := conns.Load(); n > 64 {
		t.Errorf("800 exchanges by 16 callers opened %d connections", n)
	}
}

// A server that closes its idle connections (Node's does after 5 s) must
// not fail the next call: the pool sees the close and dials anew.
func TestServerClosedIdleConnection(t *testing.T) {
	s, conns := counted(t, http.HandlerFunc(echo))
	c := client(t, &h1.Transport{})
	post(t, c, s.URL, "one")
	s.CloseClientConnections()
	time.Sleep(50 * time.Millisecond) // the FIN arrives
	for i := range 3 {
		if got := post(t, c, s.URL, "two"); !strings.Contains(got, "two") {
			t.Fatalf("call %d after the server closed the connection: %s", i, got)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("opened %d connections, want 2", n)
	}
}

// rawServer answers each connection's requests with the bytes answer
// returns for the i-th request on it, closing the connection when close
// says so.
func rawServer(t *testing.T, answer func(i int, req *http.Request) (string, bool)) (string, *atomic.Int64) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	wg.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			mu.Lock()
			open = append(open, nc)
			mu.Unlock()
			wg.Go(func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					out, end := answer(i, req)
					if _, err := io.WriteString(nc, out); err != nil || end {
						return
					}
				}
			})
		}
	})
	return "http://" + l.Addr().String() + "/", &conns
}

func TestFramings(t *testing.T) {
	url, conns := rawServer(t, func(i int, req *http.Request) (string, bool) {
		switch req.URL.Query().Get("f") {
		case "chunked":
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", false
		case "hints":
			return "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false
		case "close":
			return "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye", true
		case "eof":
			return "HTTP/1.1 200 OK\r\n\r\nuntil the end", true
		case "empty":
			return "HTTP/1.1 204 No Content\r\n\r\n", false
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain", false
	})
	c := client(t, &h1.Transport{})
	for _, tc := range []struct{ f, want string }{
		{"plain", "plain"}, {"chunked", "hello world"}, {"hints", "ok"}, {"empty", ""}, {"plain", "plain"},
		{"close", "bye"}, {"plain", "plain"}, {"eof", "until the end"}, {"plain", "plain"},
	} {
		resp, got := get(t, c, url+"?f="+tc.f)
		if got != tc.want {
			t.Errorf("%s: body %q, want %q (status %d)", tc.f, got, tc.want, resp.StatusCode)
		}
	}
	// Connections: the first, one after "close", one after "eof".
	if n := conns.Load(); n != 3 {
		t.Errorf("opened %d connections, want 3", n)
	}
}

func TestHEADHasNoBody(t *testing.T) {
	s, conns := counted(t, http.HandlerFunc(echo))
	c := client(t, &h1.Transport{})
	for range 3 {
		resp, err := c.Head(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := post(t, c, s.URL, "after"); !strings.Contains(got, "after") {
		t.Fatalf("a POST after HEADs: %s", got)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("opened %d connections, want 1", n)
	}
}

// held is a server that answers with a header and then holds the body
// open (an event stream) until the test ends.
func held(t *testing.T) (*httptest.Server, chan struct{}) {
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/quick" {
			fmt.Fprint(w, "quick")
			return
		}
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); s.Close() })
	return s, release
}

func TestCancelDuringBodyRead(t *testing.T) {
	s, _ := held(t)
	c := client(t, &h1.Transport{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "first") {
		t.Fatalf("first event: %q, %v", buf[:n], err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = resp.Body.Read(buf)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a read when the context ends returned %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the read took %v to end", d)
	}
}

func TestCancelBeforeHeader(t *testing.T) {
	s, _ := held(t)
	c := client(t, &h1.Transport{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/slow", strings.NewReader("x"))
	start := time.Now()
	_, err := c.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call past its deadline returned %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the call took %v to end", d)
	}
	// The connection was spent: a later call works on a new one.
	if got := post(t, c, s.URL+"/quick", "y"); got != "quick" {
		t.Errorf("the call after: %q", got)
	}
}

func TestCloseDuringReadInterrupts(t *testing.T) {
	s, _ := held(t)
	c := client(t, &h1.Transport{})
	resp, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	resp.Body.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a read interrupted by Close returned no error")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not interrupt a blocked read")
	}
}

// A server that sends header lines without end is cut off at
// MaxHeaderBytes, and the memory it made the client hold stays near that.
func TestEndlessHeaderIsBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_, _ = http.ReadRequest(bufio.NewReader(nc))
		_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\n")
		line := []byte("X-Filler: " + strings.Repeat("a", 1000) + "\r\n")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := nc.Write(line); err != nil {
				return
			}
		}
	})
	c := client(t, &h1.Transport{MaxHeaderBytes: 256 << 10})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = c.Get("http://" + l.Addr().String())
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "header too large") {
		t.Fatalf("an endless header gave %v, want a header-too-large error", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("reading a header cut off at 256 KiB allocated %d bytes", grew)
	}
}

func TestHTTPSGoesToFallback(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(echo))
	defer s.Close()
	c := client(t, &h1.Transport{Fallback: s.Client().Transport})
	if got := post(t, c, s.URL, "over tls"); !strings.Contains(got, "over tls") {
		t.Fatalf("answer %s", got)
	}
	if _, err := (&http.Client{Transport: &h1.Transport{}}).Get(s.URL); err == nil {
		t.Error("https with no fallback succeeded")
	}
}

// A body whose reader fails is not half sent and then forgotten: the call
// fails and the connection is not reused.
func TestRequestBodyErrorFailsTheCall(t *testing.T) {
	s, _ := counted(t, http.HandlerFunc(echo))
	c := client(t, &h1.Transport{})
	body := io.MultiReader(strings.NewReader("part"), errReader{})
	req, _ := http.NewRequest(http.MethodPost, s.URL, body)
	req.ContentLength = 100
	if _, err := c.Do(req); err == nil {
		t.Fatal("a request whose body failed succeeded")
	}
	if got := post(t, c, s.URL, "next"); !strings.Contains(got, "next") {
		t.Fatalf("the next call: %s", got)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

func TestIdleConnectionsAreBounded(t *testing.T) {
	s, conns := counted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		echo(w, r)
	}))
	tr := &h1.Transport{MaxIdle: 2}
	c := client(t, tr)
	round := func() {
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() { post(t, c, s.URL, "x") })
		}
		wg.Wait()
	}
	round()
	first := conns.Load()
	round()
	// Of the first round's 6 connections 2 stayed: the second round opens
	// 4 more.
	if opened := conns.Load() - first; opened != 4 {
		t.Errorf("the second round opened %d connections, want 4 (2 kept idle)", opened)
	}
}

// A POST whose body had partly gone out when its reused connection failed
// is not sent again: the server may have run it. Go's own server makes
// this happen to a handler that answers without reading a large body: it
// answers, waits, and resets the connection while the client still writes.
func TestPartlySentPOSTIsNotSentAgain(t *testing.T) {
	var posts atomic.Int64
	s, _ := counted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1) // a tools/call with side effects
		}
		io.WriteString(w, "ok")
	}))
	c := client(t, &h1.Transport{})
	get(t, c, s.URL) // a connection to reuse
	req, _ := http.NewRequest(http.MethodPost, s.URL, bytes.NewReader(make([]byte, 64<<20)))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("a POST reached the server %d times", n)
	}
}

// A server that answers before taking the whole body (a 413) and closes is
// heard: the caller gets its answer, not the write's broken pipe.
func TestEarlyAnswerIsHeard(t *testing.T) {
	s, _ := counted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	c := client(t, &h1.Transport{})
	req, _ := http.NewRequest(http.MethodPost, s.URL, bytes.NewReader(make([]byte, 64<<20)))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("the server answered 413; the caller got %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
}

// A connection in use when CloseIdleConnections is called (an upstream let
// go with a call in flight) is closed when its body is done, not pooled in
// a transport nobody uses.
func TestCloseIdleConnectionsClosesThoseInUse(t *testing.T) {
	s, conns := counted(t, http.HandlerFunc(echo))
	tr := &h1.Transport{}
	c := client(t, tr)
	resp, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	post(t, c, s.URL, "x")
	if n := conns.Load(); n != 2 {
		t.Errorf("opened %d connections, want 2: the one in use was pooled", n)
	}
}

// An idle connection is closed once idle for IdleTimeout, whether or not
// another request comes: no socket lingers (in CLOSE_WAIT once the server
// gives up on it).
func TestIdleConnectionClosedAfterIdleTimeout(t *testing.T) {
	closed := make(chan struct{})
	s := httptest.NewUnstartedServer(http.HandlerFunc(echo))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			close(closed)
		}
	}
	s.Start()
	defer s.Close()
	c := client(t, &h1.Transport{IdleTimeout: 50 * time.Millisecond})
	post(t, c, s.URL, "x")
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Error("an idle connection with IdleTimeout 50ms was still open after 2 s")
	}
}

func TestNoHostIsRefused(t *testing.T) {
	dialed := ""
	tr := &h1.Transport{Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
		dialed = addr
		return nil, errors.New("no dial expected")
	}}
	req, _ := http.NewRequest(http.MethodGet, "http:///path", nil)
	if _, err := tr.RoundTrip(req); err == nil || dialed != "" {
		t.Errorf("a URL with no host: err %v, dialed %q", err, dialed)
	}
}

// A request whose header asks "Connection: close" does not leave its
// connection pooled, even with a server that ignores the header.
func TestConnectionCloseHeaderIsHonoured(t *testing.T) {
	url, conns := rawServer(t, func(int, *http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false
	})
	c := client(t, &h1.Transport{})
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Connection", "close")
		resp, err := c.Do(req)
		read(t, resp, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("two requests asking Connection: close used %d connections, want 2", n)
	}
}

// Many callers, random cancellations and random Closes during Reads: every
// body that is read whole must be its own request's answer.
func TestNoCrossTalkUnderCancelsAndCloses(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		mode := r.URL.Query().Get("m")
		fmt.Fprintf(w, "A%s;", id)
		if mode == "slow" {
			w.(http.Flusher).Flush()
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		}
		fmt.Fprintf(w, "B%s;", id)
	}))
	defer s.Close()
	tr := &h1.Transport{MaxIdle: 4}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad, whole := 0, 0
	for g := range 32 {
		wg.Go(func() {
			for i := range 300 {
				id := fmt.Sprintf("%d-%d", g, i)
				mode := []string{"fast", "slow"}[rand.IntN(2)]
				ctx, cancel := context.WithCancel(context.Background())
				if rand.IntN(3) == 0 {
					time.AfterFunc(time.Duration(rand.IntN(400))*time.Microsecond, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"?m="+mode+"&id="+id, strings.NewReader("body "+id))
				resp, err := c.Do(req)
				if err != nil {
					cancel()
					continue
				}
				if rand.IntN(4) == 0 {
					go func() {
						time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
						resp.Body.Close()
					}()
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				cancel()
				mu.Lock()
				if err == nil {
					whole++
				}
				mu.Unlock()
				if err == nil && string(b) != "A"+id+";B"+id+";" {
					mu.Lock()
					bad++
					if bad < 5 {
						t.Errorf("request %s read %q", id, b)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	// Most exchanges are neither cancelled nor closed early: a transport
	// that failed them all would check nothing.
	if whole < 9600/2 {
		t.Errorf("only %d of 9600 bodies were read whole", whole)
	}
}

// A fault sequence on one transport: the server drops its connections,
// the next call works on a new one; the server goes away, calls fail at
// once with the refusal (no hang, no retry loop); it comes back on the
// same address, and calls work again.
func TestDropRecoverOutageRecover(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	serve := func(l net.Listener) *httptest.Server {
		s := httptest.NewUnstartedServer(http.HandlerFunc(echo))
		s.Listener.Close()
		s.Listener = l
		s.Start()
		return s
	}
	s := serve(l)
	c := client(t, &h1.Transport{})
	url := "http://" + addr
	if got := post(t, c, url, "first"); !strings.Contains(got, "first") {
		t.Fatalf("first call: %s", got)
	}
	s.CloseClientConnections() // the drop
	time.Sleep(50 * time.Millisecond)
	if got := post(t, c, url, "after the drop"); !strings.Contains(got, "after the drop") {
		t.Fatalf("after the drop: %s", got)
	}
	s.Close() // the outage
	for i := range 3 {
		start := time.Now()
		resp, err := c.Post(url, "text/plain", strings.NewReader("during"))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("call %d during the outage succeeded", i)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("call %d during the outage: %v, want connection refused", i, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("call %d during the outage took %v", i, d)
		}
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address could not be taken again: %v", err)
	}
	s = serve(l)
	defer s.Close()
	if got := post(t, c, url, "back"); !strings.Contains(got, "back") {
		t.Fatalf("after the outage: %s", got)
	}
}

// A request net/http's Transport refuses before sending (a header name or
// value it would not put on the wire, a NUL or DEL in a value, a method
// that is not a token) is refused here too, before a connection is dialed:
// an operator's header or an authorization server's token with such a
// byte fails the call rather than reaching the upstream.
func TestInvalidRequestIsRefusedAsNetHTTPDoes(t *testing.T) {
	srv, conns := counted(t, http.HandlerFunc(echo))
	for _, c := range []struct {
		name   string
		method string
		header http.Header
	}{
		{"NUL in a value", http.MethodPost, http.Header{"X-Token": {"a\x00b"}}},
		{"DEL in a value", http.MethodPost, http.Header{"Authorization": {"Bearer a\x7fb"}}},
		{"space in a name", http.MethodPost, http.Header{"X Token": {"a"}}},
		{"method not a token", "PO ST", nil},
	} {
		build := func() *http.Request {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
			req.Method = c.method
			for k, v := range c.header {
				req.Header[k] = v
			}
			return req
		}
		std := &http.Transport{}
		_, stdErr := std.RoundTrip(build())
		std.CloseIdleConnections()
		tr := &h1.Transport{}
		resp, err := tr.RoundTrip(build())
		if resp != nil {
			resp.Body.Close()
		}
		tr.CloseIdleConnections()
		if stdErr == nil {
			t.Fatalf("%s: net/http's Transport sent it; the case is wrong", c.name)
		}
		if err == nil {
			t.Errorf("%s: sent, where net/http refuses it (%v)", c.name, stdErr)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections opened for requests refused before sending", n)
	}
}
