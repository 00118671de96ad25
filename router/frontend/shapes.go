package frontend

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// A request's shape is everything about it that decides how it is served
// but its id: the path, query and host, the principal the chain
// authenticated, every header but Content-Length (whose body is in the
// shape anyway), and the body with the id's value cut out (IDSpan). Two
// requests of one shape validate alike, are routed, admitted and keyed in
// the cache alike, and get the same answer but for its id.
//
// shapes remembers the requests the HTTP frontend validated by their
// shape, so the next of a shape skips the decoding and validation (the
// request made the first time is reused, with the new request's headers),
// and carries the router's plan for it (mcp.Shape): a repeated read is a
// lookup here, a few checks and a memory lookup in the router, and a write.
// The memo is keyed by the SHA-256 of a secret of the frontend's and the
// shape, never the shape: no credential a header carries is kept (the
// buffer the shape is written out in is cleared once hashed), the keys
// cannot be used to test guesses of one, and no two shapes are taken for
// one. Only the requests the router planned (a cacheable read) are kept:
// a tool call's arguments are not held past their request.
//
// A client controls how many shapes there are: a shape's size, and the
// bytes all the remembered requests hold (the bodies they are slices of),
// are bounded, and a full memo is emptied (a request of a forgotten shape
// is only validated again). Requests carrying a trace context or a request
// id are not remembered: each one's differs (perRequest).
type shapes struct {
	secret [32]byte // set once, before any request
	mu     sync.RWMutex
	m      map[shapeKey]*mcp.Request
	bytes  int
}

// newShapes returns an empty memo with a secret of its own.
func newShapes() *shapes {
	s := &shapes{}
	_, _ = rand.Read(s.secret[:]) // never fails (crypto/rand)
	return s
}

// perRequest reports whether k (canonical) is a header that clients and
// tracing vendors set anew on every request: a request holding one has a
// shape no other repeats, and remembering it would only crowd out those
// that do.
func perRequest(k string) bool {
	switch k {
	case "Traceparent", "X-Request-Id", "X-Correlation-Id", "X-Amzn-Trace-Id",
		"B3", "X-B3-Traceid", "Sentry-Trace", "Uber-Trace-Id", "X-Cloud-Trace-Context":
		return true
	}
	return false
}

// shapeKey is the SHA-256 of a shape.
type shapeKey [sha256.Size]byte

const (
	maxShapeBytes  = 4 << 10 // a body's, and its headers'
	maxHeaders     = 32
	maxShapesBytes = 8 << 20
	// entryBytes is what a remembered read holds beside its body, as
	// measured (TestShapesBounded, without the bound: 61 MiB for 30,000):
	// the request, its params and _meta maps, the map's entry, the
	// router's plan.
	entryBytes = 2 << 10
)

// shapeBufs holds buffers to write shapes out in: none grows beyond a
// bounded shape's size (of).
var shapeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// of returns the key of r's shape, whose body is body (written out in
// *buf), and the span of the body's id; ok is false for a request that
// has none to remember by: one no plan is made for (mcp.Shaped, by the
// method its headers mirror), or one holding a per-request header.
func (s *shapes) of(buf *[]byte, r *http.Request, body []byte) (key shapeKey, idStart, idEnd int, ok bool) {
	if len(body) > maxShapeBytes || len(r.Header) > maxHeaders {
		return key, 0, 0, false
	}
	if m := r.Header[mcp.HeaderMethod]; len(m) != 1 || !mcp.Shaped(m[0]) {
		return key, 0, 0, false
	}
	var fields [maxHeaders]headerField
	n, size, ok := shapeFields(r.Header, &fields)
	if !ok {
		return key, 0, 0, false
	}
	p := auth.From(r.Context())
	size += 4*binary.MaxVarintLen64 + len(r.URL.Path) + len(r.URL.RawQuery) + len(r.Host) + 1
	if p != nil {
		size += len(p.ID)
	}
	if size > maxShapeBytes {
		return key, 0, 0, false
	}
	idStart, idEnd, ok = jsonrpc.IDSpan(body)
	if !ok {
		return key, 0, 0, false
	}
	size += len(s.secret) + 2*binary.MaxVarintLen64 + len(body)
	if cap(*buf) < size {
		// Grown in one step: no outgrown array is left holding part of a
		// shape, which only the one written in is cleared of.
		*buf = make([]byte, 0, size)
	}
	b := append((*buf)[:0], s.secret[:]...)
	b = appendField(b, r.URL.Path)
	b = appendField(b, r.URL.RawQuery)
	b = appendField(b, r.Host)
	if p != nil {
		b = appendField(b, p.ID)
		b = append(b, boolByte(p.Keyed))
	} else {
		b = append(b, 0)
	}
	slices.SortFunc(fields[:n], func(a, b headerField) int { return strings.Compare(a.name, b.name) })
	for _, f := range fields[:n] {
		b = appendField(b, f.name)
		b = binary.AppendUvarint(b, uint64(len(f.values)))
		for _, v := range f.values {
			b = appendField(b, v)
		}
	}
	b = appendField(b, body[:idStart])
	b = appendField(b, body[idEnd:])
	sum := sha256.Sum256(b)
	clear(b) // it held the caller's credentials
	*buf = b[:0]
	return sum, idStart, idEnd, true
}

// shapeFields puts in fields the headers of h that are in its shape (all
// but Content-Length: its body is), and returns how many, and a bound of
// what they take written out; ok is false when h holds a per-request
// header. h has at most maxHeaders.
func shapeFields(h http.Header, fields *[maxHeaders]headerField) (n, size int, ok bool) {
	for k, vs := range h {
		if perRequest(k) {
			return 0, 0, false
		}
		if k != "Content-Length" {
			fields[n] = headerField{k, vs}
			n++
			size += 2*binary.MaxVarintLen64 + len(k)
			for _, v := range vs {
				size += binary.MaxVarintLen64 + len(v)
			}
		}
	}
	return n, size, true
}

// headerField is one header of a request, its name and its values.
type headerField struct {
	name   string
	values []string
}

// appendField appends v with its length before it: no two lists of fields
// make the same bytes.
func appendField[T string | []byte](b []byte, v T) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func boolByte(v bool) byte {
	if v {
		return 2
	}
	return 1
}

// get returns the request remembered for the shape of key, nil if none.
func (s *shapes) get(key shapeKey) *mcp.Request {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[key]
}

// shaped gives req an mcp.Shape for the router to fill, and returns the
// copy of req to remember if the router does (keep), which shares it; what
// was the caller's alone (its headers) is not in the copy.
func shaped(req *mcp.Request) (kept *mcp.Request) {
	k := *req
	k.Header, k.Mirror, k.Shape = nil, nil, &mcp.Shape{}
	req.Shape = k.Shape
	return &k
}

// keep remembers kept (shaped), made of a body holding size bytes, for the
// shape of key, if the router planned it: what it did not plan it has no
// faster way to serve, and its params may be anything a caller sent.
func (s *shapes) keep(key shapeKey, size int, kept *mcp.Request) {
	if kept.Shape.Plan() == nil {
		return
	}
	cost := size + entryBytes
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || s.bytes+cost > maxShapesBytes {
		s.m, s.bytes = make(map[shapeKey]*mcp.Request), 0
	}
	if _, ok := s.m[key]; !ok {
		s.bytes += cost
	}
	s.m[key] = kept
}

// serving is the request to serve for the remembered req, with the
// headers of the caller's own HTTP request h.
func serving(req *mcp.Request, h http.Header) *mcp.Request {
	sub := *req
	sub.Header, sub.Mirror = h, headerMirror(h)
	return &sub
}
