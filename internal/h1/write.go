package h1

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes req to w byte for byte as req.Write does, for the
// requests Manifold sends (a body of known length, a plain host, nothing
// net/http's transfer writer would add); every other request is left to
// req.Write. req.Write formats its lines with fmt, sorts the header through
// a pooled sorter and builds a transfer writer: 3.7 µs of a hop's 112 in
// scripts/profile-hop. The same sanitizing is kept: header names net/http
// would not send are dropped, CR and LF in values become spaces (no header
// or request can be smuggled in a value), a request target with a control
// byte is refused. TestWriteRequestIsRequestWrite and FuzzWriteRequest
// hold the bytes to req.Write's.
func writeRequest(w *bufio.Writer, req *http.Request) error {
	host, ok := plainHost(req)
	if !ok || req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.Close ||
		req.TransferEncoding != nil || req.Trailer != nil || req.URL.Opaque != "" {
		return req.Write(w)
	}
	ruri := req.URL.RequestURI()
	if hasCTL(ruri) {
		return req.Write(w) // its error
	}
	defer req.Body.Close()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	writeStrings(w, method, " ", ruri, " HTTP/1.1\r\nHost: ", host, "\r\n")
	ua := "Go-http-client/1.1"
	if _, set := req.Header["User-Agent"]; set {
		ua = req.Header.Get("User-Agent")
	}
	if ua != "" {
		writeStrings(w, "User-Agent: ", headerValue(ua), "\r\n")
	}
	w.WriteString("Content-Length: ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), req.ContentLength, 10))
	w.WriteString("\r\n")
	var keys [16]string
	names := keys[:0]
	for k := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		if httpguts.ValidHeaderFieldName(k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range req.Header[k] {
			writeStrings(w, k, ": ", headerValue(v), "\r\n")
		}
	}
	if _, err := w.WriteString("\r\n"); err != nil {
		return err
	}
	return writeBody(w, req)
}

// writeBody writes req's ContentLength bytes of body, failing as req.Write
// does when the body holds another number.
func writeBody(w *bufio.Writer, req *http.Request) error {
	n, err := io.Copy(w, io.LimitReader(req.Body, req.ContentLength))
	if err != nil {
		return err
	}
	extra, err := io.Copy(io.Discard, req.Body)
	if err != nil {
		return err
	}
	if n+extra != req.ContentLength {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, n+extra)
	}
	return nil
}

// plainHost is the Host req.Write sends when it is plain ASCII with no
// zone, which are the ones writeRequest writes.
func plainHost(req *http.Request) (string, bool) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 || host[i] == '%' {
			return "", false // punycode or a zone: req.Write's to clean
		}
	}
	return host, httpguts.ValidHostHeader(host)
}

// headerValue is v as net/http writes a header value: CR and LF made
// spaces, then spaces and tabs trimmed.
func headerValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v)
	}
	if v == "" || !padding(v[0]) && !padding(v[len(v)-1]) {
		return v // most are
	}
	return strings.Trim(v, " \t")
}

func padding(b byte) bool { return b == ' ' || b == '\t' }

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// writeStrings writes each of ss to w; a failure stays in w for its next
// write or Flush to report.
func writeStrings(w *bufio.Writer, ss ...string) {
	for _, s := range ss {
		w.WriteString(s)
	}
}
