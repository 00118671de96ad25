package frontend

import (
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
// The lookup compares the whole shape, never a digest of it, so no two
// requests are taken for one.
//
// A client controls how many shapes there are: a shape's size, and the
// bytes all of them hold (shapes and the bodies their requests are slices
// of), are bounded, and a full memo is emptied (a request of a forgotten
// shape is only validated again). Requests carrying a trace context are
// not remembered: each one's differs.
type shapes struct {
	mu    sync.RWMutex
	m     map[string]*mcp.Request
	bytes int
}

const (
	maxShapeBytes  = 4 << 10 // a body's, and its headers'
	maxHeaders     = 32
	maxShapesBytes = 4 << 20
	// entryBytes is about what a remembered request holds beside its
	// body: the request, its params and _meta maps, the map's entry.
	entryBytes = 1 << 10
)

var shapeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// of writes the shape of r, whose body is body, into *buf, returning the
// span of the body's id; ok is false for a request that has none to
// remember by.
func (s *shapes) of(buf *[]byte, r *http.Request, body []byte) (idStart, idEnd int, ok bool) {
	if len(body) > maxShapeBytes || len(r.Header) > maxHeaders {
		return 0, 0, false
	}
	if _, traced := r.Header["Traceparent"]; traced {
		return 0, 0, false
	}
	idStart, idEnd, ok = jsonrpc.IDSpan(body)
	if !ok {
		return 0, 0, false
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
	return idStart, idEnd, len(b)-len(body) <= maxShapeBytes
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

// get returns the request remembered for shape, nil if none.
func (s *shapes) get(shape []byte) *mcp.Request {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[string(shape)]
}

// put remembers req, as Validate made it of a body of size bytes, for
// shape, and returns the copy to serve: both share one mcp.Shape, which
// the router fills. What was the caller's alone (its headers) is not kept.
func (s *shapes) put(shape []byte, size int, req *mcp.Request) *mcp.Request {
	kept := *req
	kept.Header, kept.Mirror, kept.Shape = nil, nil, &mcp.Shape{}
	cost := 2*len(shape) + size + entryBytes // the router's plan keeps the headers once more
	s.mu.Lock()
	if s.m == nil || s.bytes+cost > maxShapesBytes {
		s.m, s.bytes = make(map[string]*mcp.Request), 0
	}
	if _, ok := s.m[string(shape)]; !ok {
		s.bytes += cost
	}
	s.m[string(shape)] = &kept
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
