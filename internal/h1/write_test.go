package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// requestCase is a request to write, built anew for each writer (a body
// is read once).
type requestCase struct {
	method, target, host string
	header               http.Header
	body                 string
	length               int64 // the ContentLength claimed; -1: len(body)
	close                bool
}

func (c requestCase) build(t testing.TB) *http.Request {
	u, err := url.Parse(c.target)
	if err != nil {
		t.Skip(err)
	}
	req := &http.Request{Method: c.method, URL: u, Host: c.host, Header: http.Header{}, Close: c.close, ContentLength: c.length}
	for k, vs := range c.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if c.length < 0 {
		req.ContentLength = int64(len(c.body))
	}
	if c.body != "" || c.length != 0 {
		req.Body = io.NopCloser(strings.NewReader(c.body))
	}
	return req
}

// written is what w writes for c: its bytes, or its error.
func written(t testing.TB, c requestCase, w func(*bufio.Writer, *http.Request) error) (string, error) {
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	err := w(bw, c.build(t))
	if err == nil {
		err = bw.Flush()
	}
	return b.String(), err
}

func sameAsRequestWrite(t testing.TB, c requestCase) {
	t.Helper()
	want, wantErr := written(t, c, func(w *bufio.Writer, r *http.Request) error { return r.Write(w) })
	got, err := written(t, c, writeRequest)
	if (err != nil) != (wantErr != nil) || err == nil && got != want {
		t.Fatalf("%+v:\nwriteRequest %q, %v\nreq.Write    %q, %v", c, got, err, want, wantErr)
	}
}

// What writeRequest sends is what req.Write sends, to the byte: a
// Manifold call, and every input whose sanitizing matters (a value
// smuggling a header, names net/http drops, the headers it writes from
// the request's fields, a body that is not the length it claims, a target
// with a control byte).
func TestWriteRequestIsRequestWrite(t *testing.T) {
	call := http.Header{
		"Content-Type":         {"application/json"},
		"Accept":               {"application/json, text/event-stream"},
		"Mcp-Protocol-Version": {"2025-11-25"},
		"Mcp-Session-Id":       {"abc"},
		"Authorization":        {"Bearer t0ken"},
		"X-Many":               {"one", "two"},
	}
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}`
	many := http.Header{}
	for i := range 40 {
		many.Set("X-H-"+strings.Repeat("a", i), "v")
	}
	for _, c := range []requestCase{
		{method: "POST", target: "http://127.0.0.1:8080/mcp", header: call, body: body, length: -1},
		{method: "POST", target: "http://h/mcp?x=1&y=%20", header: call, body: body, length: -1},
		{method: "POST", target: "http://h/a%2Fb", body: "x", length: -1},
		{method: "POST", target: "http://h/", host: "other:81", body: "x", length: -1},
		{method: "POST", target: "http://h/", header: http.Header{"X-Evil": {"a\r\nInjected: 1"}, "X-Lf": {"a\nb"}}, body: "x", length: -1},
		{method: "POST", target: "http://h/", header: http.Header{"Bad Name": {"v"}, "Bad:Name": {"v"}, "": {"v"}, "Ok": {"v"}}, body: "x", length: -1},
		{method: "POST", target: "http://h/", header: http.Header{"X-Pad": {" \tpadded\t "}}, body: "x", length: -1},
		{method: "POST", target: "http://h/", header: http.Header{"User-Agent": {"manifold"}}, body: "x", length: -1},
		{method: "POST", target: "http://h/", header: http.Header{"User-Agent": {""}}, body: "x", length: -1},
		{method: "POST", target: "http://h/", header: http.Header{"User-Agent": {"a\r\nB: c"}}, body: "x", length: -1},
		{method: "POST", target: "http://h/", header: http.Header{"Host": {"evil"}, "Content-Length": {"999"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X"}}, body: "x", length: -1},
		{method: "POST", target: "http://h/", header: many, body: "x", length: -1},
		{method: "POST", target: "http://h/", body: "short", length: 10},
		{method: "POST", target: "http://h/", body: "longer than claimed", length: 3},
		{method: "POST", target: "http://h/", body: "x", length: -1, close: true},
		{method: "POST", target: "http://h/", host: "bad host\r\nX: y", body: "x", length: -1},
		{method: "POST", target: "http://[fe80::1%25eth0]:80/", body: "x", length: -1},
		{method: "POST", target: "http://bücher.example/", body: "x", length: -1},
		{method: "", target: "http://h/", body: "x", length: -1},
		{method: "GET", target: "http://h/", length: 0},
		{method: "POST", target: "http://h/", length: 0},
		{method: "DELETE", target: "http://h/mcp", header: http.Header{"Mcp-Session-Id": {"s"}}, length: 0},
	} {
		sameAsRequestWrite(t, c)
	}
	ctl := requestCase{method: "POST", target: "http://h/", body: "x", length: -1}
	req := ctl.build(t)
	req.URL.RawQuery = "a\x01b"
	if err := writeRequest(bufio.NewWriter(io.Discard), req); err == nil {
		t.Error("a request target with a control byte was written")
	}
}

// Any header, target, host and body: writeRequest writes what req.Write
// does, or fails where it fails.
func FuzzWriteRequest(f *testing.F) {
	f.Add("/mcp", "", "Mcp-Session-Id", "abc", "Go", `{"id":1}`, int64(-1))
	f.Add("/a?b=c", "h:1", "X-Evil", "a\r\nB: c", "", "x", int64(-1))
	f.Add("/", "", "Bad Name", " v\t", "u\na", "xyz", int64(2))
	f.Fuzz(func(t *testing.T, target, host, name, value, ua, body string, length int64) {
		c := requestCase{method: "POST", target: "http://127.0.0.1" + target, host: host, body: body, length: length,
			header: http.Header{name: {value}, "User-Agent": {ua}, "Content-Type": {"application/json"}}}
		if length < -1 || length > 1<<20 {
			return
		}
		sameAsRequestWrite(t, c)
	})
}
