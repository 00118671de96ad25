// Package jsonrpc is Manifold's wire layer: JSON-RPC 2.0 messages whose params
// and results stay raw JSON.
//
// Manifold interprets a handful of fields (a method, a URI, a cursor, the cache
// hints) and must hand everything else on unchanged: unknown fields, `_meta`,
// annotations and icons. Keeping params and results as json.RawMessage means a
// message is decoded only as deep as a caller asks, and whatever a caller does
// not touch is re-emitted byte for byte. A message is checked and split in
// one pass over its bytes (Decode), a request's params and their `_meta`
// with it.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Version is the only JSON-RPC version MCP speaks.
const Version = "2.0"

// Standard and MCP error codes. The range -32020..-32099 is reserved for the
// MCP specification; Manifold never invents a code there.
const (
	CodeParseError         = -32700
	CodeInvalidRequest     = -32600
	CodeMethodNotFound     = -32601
	CodeInvalidParams      = -32602
	CodeInternalError      = -32603
	CodeHeaderMismatch     = -32020
	CodeMissingCapability  = -32021
	CodeUnsupportedVersion = -32022
	// CodeRateLimited is Manifold's own: the caller or the upstream it
	// asked for is over its rate limit; data.retryAfterMs says when to try
	// again. An upstream cannot send it: codes in the range reserved for
	// implementations reach callers only from Manifold itself.
	CodeRateLimited = -32000

	// CodeLegacyResourceNotFound is what servers of 2025-11-25 and earlier
	// answer for an unknown resource. It must never leave Manifold.
	CodeLegacyResourceNotFound = -32002
	// CodeURLElicitationRequired is 2025-11-25's "open this URL first"
	// (2026-07-28 asks with input_required instead).
	CodeURLElicitationRequired = -32042
)

// Message is any JSON-RPC message: a request (Method and ID), a notification
// (Method, no ID) or a response (ID with Result or Error).
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`

	decoded *decoded // what Decode split of the params; nil if none
}

// ParamsObject returns the members of the params of a message returned by
// Decode, which split them as it checked the message: the first call
// takes that split, later ones split again, so each caller owns the
// Object it gets and may change it.
func (m *Message) ParamsObject() (Object, error) {
	if d := m.decoded; d != nil && d.params != nil && sameBytes(d.from, m.Params) {
		p := d.params
		d.params = nil
		return p, nil
	}
	return split(m.Params)
}

// RequestParams is ParamsObject without the `_meta` member (where MCP
// carries a request's metadata), and that member's own members, as a
// frontend takes a request: the params or their `_meta` not an object is
// the -32602 error it answers.
func (m *Message) RequestParams() (params, meta Object, rpcErr *Error) {
	d := m.decoded
	split := d != nil && d.params != nil && d.meta != nil && sameBytes(d.from, m.Params)
	params, err := m.ParamsObject()
	if err != nil {
		return nil, nil, Errorf(CodeInvalidParams, "params must be an object")
	}
	if split {
		meta, d.meta = d.meta, nil
	} else if meta, err = params.Object("_meta"); err != nil {
		return nil, nil, Errorf(CodeInvalidParams, "params._meta must be an object")
	}
	delete(params, "_meta")
	return params, meta, nil
}

// sameBytes reports whether a and b are the same slice of one array.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// HasID reports whether the message carries a non-null id.
func (m *Message) HasID() bool { return len(m.ID) > 0 && !bytes.Equal(m.ID, null) }

// IsRequest reports whether m expects a response.
func (m *Message) IsRequest() bool { return m.Method != "" && m.HasID() }

// IsNotification reports whether m is a notification.
func (m *Message) IsNotification() bool { return m.Method != "" && !m.HasID() }

// IsResponse reports whether m answers a request.
func (m *Message) IsResponse() bool { return m.Method == "" && (m.Result != nil || m.Error != nil) }

var null = []byte("null")

// Error is a JSON-RPC error object. It is also a Go error, so a handler can
// return one and have it reach the caller with its code intact.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Unavailable marks an error of Manifold's own saying a service it
	// depends on is down (HTTP 503 with Retry-After). It is never decoded
	// from a peer, so no upstream's error can pass for it.
	Unavailable bool `json:"-"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message)
}

// Errorf builds an Error with a formatted message and no data.
func Errorf(code int64, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithData returns a copy of e carrying data, marshalled. A value that cannot
// be marshalled is a programming error and panics.
func (e *Error) WithData(data any) *Error {
	b, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("jsonrpc: error data: %v", err))
	}
	c := *e
	c.Data = b
	return &c
}

// Decode parses one message and checks its envelope. The error it returns is
// the JSON-RPC error a server should answer with (-32700 or -32600), carrying
// the id when one could be read. Member names are matched exactly, as JSON-RPC
// requires (encoding/json would also accept "Method").
func Decode(data []byte) (*Message, *Error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, Errorf(CodeInvalidRequest, "empty body")
	}
	if data[0] != '{' {
		switch {
		case !Valid(data):
			return nil, Errorf(CodeParseError, "parse error: body is not valid JSON")
		case data[0] == '[':
			return nil, Errorf(CodeInvalidRequest, "batch requests are not supported")
		}
		return nil, Errorf(CodeInvalidRequest, "a message must be a JSON object")
	}
	obj, d := Object{}, &decoded{}
	if end, ok := validInto(data, 0, 1, obj, d, 0); !ok || end != len(data) {
		return nil, Errorf(CodeParseError, "parse error: body is not valid JSON")
	}
	m := &Message{ID: obj["id"], Params: obj["params"], Result: obj["result"], decoded: d}
	if len(m.ID) > 0 && !validID(m.ID) {
		m.ID = nil
		return m, Errorf(CodeInvalidRequest, `"id" must be a string or an integer`)
	}
	if string(obj["jsonrpc"]) != `"2.0"` {
		return m, Errorf(CodeInvalidRequest, `"jsonrpc" must be "2.0"`)
	}
	m.JSONRPC = Version
	if raw, ok := obj["method"]; ok {
		if e := m.decodeMethod(raw); e != nil {
			return m, e
		}
	}
	if raw, ok := obj["error"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &m.Error); err != nil {
			return m, Errorf(CodeInvalidRequest, `"error" must be an error object`)
		}
	}
	if string(m.Result) == "null" && m.Error == nil && m.Method == "" {
		// A null result is still a result.
		m.Result = json.RawMessage("null")
	}
	if m.Params != nil && string(m.Params) != "null" && m.Params[0] != '{' {
		return m, Errorf(CodeInvalidRequest, `"params" must be an object`)
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return m, Errorf(CodeInvalidRequest, `a message needs "method", "result" or "error"`)
	}
	return m, nil
}

// decodeMethod sets the method of a request or notification.
func (m *Message) decodeMethod(raw json.RawMessage) *Error {
	var err error
	if len(raw) == 0 || raw[0] != '"' {
		return Errorf(CodeInvalidRequest, `"method" must be a string`)
	}
	if m.Method, err = unquote(raw); err != nil {
		return Errorf(CodeInvalidRequest, `"method" must be a string`)
	}
	if bytes.Equal(m.ID, null) {
		// A request with id null is neither a request nor a notification:
		// answering nothing would lose it.
		m.ID = nil
		return Errorf(CodeInvalidRequest, `"id" must be a string or an integer, not null`)
	}
	return nil
}

func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"':
		return true // a string Decode checked
	case 'n':
		return bytes.Equal(id, null)
	default:
		_, err := strconv.ParseInt(string(id), 10, 64)
		return err == nil
	}
}

// AppendResult appends the encoding of a successful response. result must be
// valid JSON; it is copied as is.
func AppendResult(dst []byte, id json.RawMessage, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendID(dst, id)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// AppendError appends the encoding of an error response.
func AppendError(dst []byte, id json.RawMessage, e *Error) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendID(dst, id)
	dst = append(dst, `,"error":`...)
	b, _ := json.Marshal(e) // an Error always marshals
	dst = append(dst, b...)
	return append(dst, '}')
}

// Encode writes m as a JSON-RPC message, as json.Marshal would but without
// validating, compacting and HTML-escaping its raw members again: they were
// validated when decoded, or built by this package. It sits on every
// upstream call.
func (m *Message) Encode() []byte {
	b := make([]byte, 0, 64+len(m.ID)+len(m.Method)+len(m.Params)+len(m.Result))
	b = append(b, `{"jsonrpc":"2.0"`...)
	if len(m.ID) > 0 {
		b = append(b, `,"id":`...)
		b = append(b, m.ID...)
	}
	if m.Method != "" {
		b = append(b, `,"method":`...)
		b = append(b, Quote(m.Method)...)
	}
	if len(m.Params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, m.Params...)
	}
	if len(m.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, m.Result...)
	}
	if m.Error != nil {
		e, _ := json.Marshal(m.Error) // an Error always marshals
		b = append(b, `,"error":`...)
		b = append(b, e...)
	}
	return append(b, '}')
}

func appendID(dst []byte, id json.RawMessage) []byte {
	if len(id) == 0 {
		return append(dst, null...)
	}
	return append(dst, id...)
}

// Notification encodes a notification with the given params (any value that
// marshals, or json.RawMessage).
func Notification(method string, params any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s params: %w", method, err)
	}
	return json.Marshal(&Message{JSONRPC: Version, Method: method, Params: p})
}
