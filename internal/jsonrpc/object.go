package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// Object is a JSON object decoded one level deep. It is how Manifold edits a
// message it does not fully understand: the members it touches are decoded and
// replaced, every other member keeps its original bytes.
type Object map[string]json.RawMessage

// ParseObject splits raw, which must be a JSON object (or empty or null,
// which give an empty Object), into its members. The member values are
// slices of raw, not copies: raw must not be modified afterwards. As with
// encoding/json, a repeated member keeps its last value.
func ParseObject(raw json.RawMessage) (Object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Object{}, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	if !Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	return split(raw)
}

// ParseValid is ParseObject for raw that Manifold itself made of JSON it
// checked (a cached answer, say): it is not checked again.
func ParseValid(raw json.RawMessage) (Object, error) { return split(raw) }

// split is ParseObject for input already known to be a valid JSON object:
// a member of a parsed Object, or a message that passed Valid.
func split(raw []byte) (Object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Object{}, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := Object{}
	i := skipSpace(raw, 1)
	if raw[i] == '}' {
		return o, nil
	}
	for {
		kEnd := skipString(raw, i)
		key, err := internKey(raw[i:kEnd])
		if err != nil {
			return nil, err
		}
		i = skipSpace(raw, kEnd) + 1 // the ':'
		i = skipSpace(raw, i)
		vEnd := skipValue(raw, i)
		o[key] = json.RawMessage(raw[i:vEnd:vEnd])
		i = skipSpace(raw, vEnd)
		if raw[i] == '}' {
			return o, nil
		}
		i = skipSpace(raw, i+1) // past the ','
	}
}

// The scanners below run on JSON already checked by Valid, so they only
// find boundaries; they never judge syntax.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i]. It
// looks for each quote with bytes.IndexByte (vector instructions) rather
// than byte by byte: a resource's text is most of an answer, and each of
// the byte-level passes skips it (2.8 µs of a 1 KiB read's hop, measured
// in scripts/profile-hop). A quote ends the string unless an odd run of
// backslashes stands before it, which is the byte-by-byte rule (each
// backslash escapes the byte after it; FuzzSkipString).
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		odd := false
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			odd = !odd
		}
		if !odd {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}

// unquote decodes a JSON string literal, without allocating beyond the
// result when it is plain ASCII without escapes (anything else goes through
// encoding/json, which also replaces invalid UTF-8).
func unquote(lit []byte) (string, error) {
	plain := true
	for _, c := range lit[1 : len(lit)-1] {
		if c == '\\' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

// Get decodes member key into v and reports whether it was present. A member
// present with the wrong type is an error.
func (o Object) Get(key string, v any) (bool, error) {
	raw, ok := o[key]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("%q: %w", key, err)
	}
	return true, nil
}

// String returns member key if it is a JSON string, else "".
func (o Object) String(key string) string {
	raw, ok := o[key]
	if !ok || len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	s, _ := unquote(raw)
	return s
}

// Str returns member key and whether it is a JSON string.
func (o Object) Str(key string) (string, bool) {
	raw, ok := o[key]
	if !ok || len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	s, err := unquote(raw)
	return s, err == nil
}

// Quote encodes s as a JSON string.
func Quote(s string) json.RawMessage { return AppendQuote(make([]byte, 0, len(s)+2), s) }

// Set replaces member key with the encoding of v.
func (o Object) Set(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %q: %w", key, err)
	}
	o[key] = b
	return nil
}

// Object returns member key decoded one level deep; a missing member gives an
// empty Object.
func (o Object) Object(key string) (Object, error) {
	sub, err := split(o[key]) // members are valid: their parent was checked
	if err != nil {
		return nil, fmt.Errorf("%q: %w", key, err)
	}
	return sub, nil
}

// Clone returns a shallow copy; the member bytes are shared and never
// mutated in place.
func (o Object) Clone() Object {
	c := make(Object, len(o))
	for k, v := range o {
		c[k] = v
	}
	return c
}

// Marshal encodes o with its members in sorted order. The members are
// valid JSON already (parsed, or produced by json.Marshal), so they are
// copied, not validated and compacted again.
func (o Object) Marshal() json.RawMessage {
	keys := make([]string, 0, len(o))
	n := 2
	for k, v := range o {
		keys = append(keys, k)
		n += len(k) + len(v) + 4
	}
	sort.Strings(keys)
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, Quote(k)...)
		b = append(b, ':')
		b = append(b, o[k]...)
	}
	return append(b, '}')
}

// Objects returns member key, which must be an array of objects, each
// decoded one level deep. A missing or null member gives nil.
func (o Object) Objects(key string) ([]Object, error) {
	raw := bytes.TrimSpace(o[key])
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, fmt.Errorf("%q: not an array", key)
	}
	var out []Object
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end := skipValue(raw, i)
		elem, err := split(raw[i:end])
		if err != nil {
			return nil, fmt.Errorf("%q[%d]: %w", key, len(out), err)
		}
		out = append(out, elem)
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	if out == nil {
		out = []Object{}
	}
	return out, nil
}

// SetObjects replaces member key with the array of objs.
func (o Object) SetObjects(key string, objs []Object) {
	b := []byte{'['}
	for i, obj := range objs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, obj.Marshal()...)
	}
	o[key] = append(b, ']')
}

// AppendQuote appends s encoded as a JSON string, as Quote would, without
// allocating when s needs no escaping.
func AppendQuote(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// internKey decodes a key literal as unquote does, giving the keys of
// every request and answer (the envelope's, MCP's params and `_meta`'s)
// as constants rather than a new string each.
func internKey(lit []byte) (string, error) {
	switch string(lit) {
	case `"jsonrpc"`:
		return "jsonrpc", nil
	case `"id"`:
		return "id", nil
	case `"method"`:
		return "method", nil
	case `"params"`:
		return "params", nil
	case `"result"`:
		return "result", nil
	case `"error"`:
		return "error", nil
	case `"_meta"`:
		return "_meta", nil
	case `"name"`:
		return "name", nil
	case `"arguments"`:
		return "arguments", nil
	case `"uri"`:
		return "uri", nil
	case `"cursor"`:
		return "cursor", nil
	case `"progressToken"`:
		return "progressToken", nil
	case `"io.modelcontextprotocol/protocolVersion"`:
		return "io.modelcontextprotocol/protocolVersion", nil
	case `"io.modelcontextprotocol/clientCapabilities"`:
		return "io.modelcontextprotocol/clientCapabilities", nil
	case `"io.modelcontextprotocol/clientInfo"`:
		return "io.modelcontextprotocol/clientInfo", nil
	case `"io.modelcontextprotocol/logLevel"`:
		return "io.modelcontextprotocol/logLevel", nil
	}
	return unquote(lit)
}
