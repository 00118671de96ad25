package jsonrpc

import (
	"bytes"
	"errors"
)

// MemberRange is one member of a JSON object, as slices of it: the key as
// written (a quoted literal) and the value.
type MemberRange struct {
	Key, Value []byte
}

// Members appends to buf the members of the JSON object obj (empty or null:
// none), in order, each
// key once (a repeated key keeps its last value, in the place of its last
// occurrence, as encoding/json and JavaScript read it). obj must be valid
// JSON (a message that passed Decode, or a member of one): nothing is
// validated again, and nothing is allocated beyond buf's growth, so a
// caller that passes a buffer on its stack rewrites a result in one pass.
func Members(obj []byte, buf []MemberRange) ([]MemberRange, error) {
	obj, ok := AsObject(obj)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		kEnd := skipString(obj, i)
		k := obj[i:kEnd:kEnd]
		i = skipSpace(obj, skipSpace(obj, kEnd)+1) // past the ':'
		if i >= len(obj) {
			return nil, errors.New("not a JSON object") // cut short
		}
		vEnd := skipValue(obj, i)
		buf = dropKey(buf, k)
		buf = append(buf, MemberRange{Key: k, Value: obj[i:vEnd:vEnd]})
		i = skipSpace(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return buf, nil
}

// AsObject is obj, valid JSON, as an object: itself trimmed, or {} for
// null or nothing, which Members takes for an object without members; ok
// is false for any other value.
func AsObject(obj []byte) ([]byte, bool) {
	obj = bytes.TrimSpace(obj)
	switch {
	case len(obj) == 0 || string(obj) == "null":
		return []byte("{}"), true
	case obj[0] == '{':
		return obj, true
	}
	return nil, false
}

// dropKey removes an earlier member of the same key (rare: a repeated key).
func dropKey(buf []MemberRange, k []byte) []MemberRange {
	for j := range buf {
		if sameKey(buf[j].Key, k) {
			return append(buf[:j], buf[j+1:]...)
		}
	}
	return buf
}

// sameKey compares two key literals, decoding them only when one has
// escapes.
func sameKey(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 {
		return false
	}
	x, err1 := unquote(a)
	y, err2 := unquote(b)
	return err1 == nil && err2 == nil && x == y
}

// KeyIs reports whether the key literal lit (as Members gives it) is key.
func KeyIs(lit []byte, key string) bool { return keyIs(lit, key) }

// IsString reports whether the JSON value v is the string s, decoding it
// only when it has escapes.
func IsString(v []byte, s string) bool {
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1:len(v)-1]) == s
	}
	d, err := unquote(v)
	return err == nil && d == s
}

// PlainKey returns the bytes between the quotes of the key literal lit (as
// Members gives it) when they are the key itself: plain ASCII without
// escapes; ok is false otherwise. A map lookup o[string(key)] allocates
// nothing, where decoding the key would.
func PlainKey(lit []byte) (key []byte, ok bool) {
	if len(lit) < 2 {
		return nil, false
	}
	key = lit[1 : len(lit)-1]
	for _, c := range key {
		if c == '\\' || c >= 0x80 {
			return nil, false
		}
	}
	return key, true
}

// StringValue decodes the JSON value v if it is a string (without
// allocating beyond the result when it is plain ASCII without escapes).
func StringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	s, err := unquote(v)
	return s, err == nil
}
