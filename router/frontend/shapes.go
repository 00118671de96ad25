package frontend

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"slices"
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
// The memo is keyed by the SHA-256 of the shape, never the shape: no
// credential a header carries is kept, and no two shapes are taken for one.
//
// A client controls how many shapes there are: a shape's size, and the
// bytes all the remembered requests hold (the bodies they are slices of),
// are bounded, and a full memo is emptied (a request of a forgotten shape
// is only validated again). Requests carrying a trace context are not
// remembered: each one's differs.
type shapes struct {
	mu    sync.RWMutex
	m     map[shapeKey]*mcp.Request
	bytes int
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

var shapeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// of returns the key of r's shape, whose body is body (written out in
// *buf), and the span of the body's id; ok is false for a request that
// has none to remember by.
func (s *shapes) of(buf *[]byte, r *http.Request, body []byte) (key shapeKey, idStart, idEnd int, ok bool) {
	if len(body) > maxShapeBytes || len(r.Header) > maxHeaders {
		return key, 0, 0, false
	}
	if _, traced := r.Header["Traceparent"]; traced {
		return key, 0, 0, false
	}
	idStart, idEnd, ok = jsonrpc.IDSpan(body)
	if !ok {
		return key, 0, 0, false
	}
	b := appendField((*buf)[:0], r.URL.Path)
	b = appendField(b, r.URL.RawQuery)
	b = appendField(b, r.Host)
	if p := auth.From(r.Context()); p != nil {
		b = appendField(b, p.ID)
		b = append(b, boolByte(p.Keyed))
	} else {
		b = append(b, 0)
	}
	var names [maxHeaders]string
	n := 0
	for k := range r.Header {
		if k != "Content-Length" {
			names[n] = k
			n++
		}
	}
	slices.Sort(names[:n])
	for _, k := range names[:n] {
		b = appendField(b, k)
		vs := r.Header[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendField(b, v)
		}
	}
	b = appendField(b, string(body[:idStart]))
	b = appendField(b, string(body[idEnd:]))
	*buf = b
	if len(b)-len(body) > maxShapeBytes {
		return key, 0, 0, false
	}
	return sha256.Sum256(b), idStart, idEnd, true
}

// appendField appends v with its length before it: no two lists of fields
// make the same bytes.
func appendField(b []byte, v string) []byte {
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

// put remembers req, as Validate made it of a body of size bytes, for the
// shape of key, and returns the copy to serve: both share one mcp.Shape,
// which the router fills. What was the caller's alone (its headers) is not
// kept.
func (s *shapes) put(key shapeKey, size int, req *mcp.Request) *mcp.Request {
	kept := *req
	kept.Header, kept.Mirror, kept.Shape = nil, nil, &mcp.Shape{}
	cost := size + entryBytes
	s.mu.Lock()
	if s.m == nil || s.bytes+cost > maxShapesBytes {
		s.m, s.bytes = make(map[shapeKey]*mcp.Request), 0
	}
	if _, ok := s.m[key]; !ok {
		s.bytes += cost
	}
	s.m[key] = &kept
	s.mu.Unlock()
	serve := *req
	serve.Shape = kept.Shape
	return &serve
}

// serving is the request to serve for the remembered req, with the
// headers of the caller's own HTTP request h.
func serving(req *mcp.Request, h http.Header) *mcp.Request {
	sub := *req
	sub.Header, sub.Mirror = h, headerMirror(h)
	return &sub
}
