package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Large results (a list page of hundreds of thousands of items) are read
// and rewritten here without decoding them: the functions below walk the
// bytes of JSON that was validated on its way in, and return slices of it
// or one new buffer, never a map per item.

// Elements splits a JSON array into its elements, as slices of raw. A null
// or empty input gives nil; anything but an array is an error.
func Elements(raw json.RawMessage) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, errors.New("not an array")
	}
	out := []json.RawMessage{}
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end := skipValue(raw, i)
		out = append(out, raw[i:end:end])
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return out, nil
}

// Member returns the value of member key of the JSON object obj, as a
// slice of it, without decoding the rest.
func Member(obj json.RawMessage, key string) (json.RawMessage, bool) {
	start, end, ok := memberRange(obj, key)
	if !ok {
		return nil, false
	}
	return obj[start:end:end], true
}

// MemberString returns member key of obj if it is a JSON string.
func MemberString(obj json.RawMessage, key string) (string, bool) {
	v, ok := Member(obj, key)
	if !ok || len(v) < 2 || v[0] != '"' {
		return "", false
	}
	s, err := unquote(v)
	return s, err == nil
}

// memberRange finds the value of member key in obj: the last one, if the
// key is repeated, as encoding/json and JavaScript keep the last (reading
// the first would rewrite one value while clients read another).
func memberRange(obj []byte, key string) (start, end int, ok bool) {
	obj = bytes.TrimRight(obj, " \t\r\n")
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return 0, 0, false
	}
	i = skipSpace(obj, i+1)
	for i < len(obj) && obj[i] == '"' {
		kEnd := skipString(obj, i)
		k := obj[i:kEnd]
		i = skipSpace(obj, skipSpace(obj, kEnd)+1) // past the ':'
		vEnd := skipValue(obj, i)
		if keyIs(k, key) {
			start, end, ok = i, vEnd, true
		}
		i = skipSpace(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return start, end, ok
}

// keyIs compares a JSON string literal with key, decoding it only when it
// has escapes.
func keyIs(lit []byte, key string) bool {
	if len(lit) == len(key)+2 && string(lit[1:len(lit)-1]) == key {
		return true
	}
	if bytes.IndexByte(lit, '\\') < 0 {
		return false
	}
	s, err := unquote(lit)
	return err == nil && s == key
}

// EachElement calls f with each element of the JSON array raw, a slice of
// it, until f fails. A null or empty input has no elements.
func EachElement(raw json.RawMessage, f func(json.RawMessage) error) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] != '[' {
		return errors.New("not an array")
	}
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end := skipValue(raw, i)
		if err := f(raw[i:end:end]); err != nil {
			return err
		}
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return nil
}

// PrefixItems returns obj with prefix put in front of the string member
// field of each element of its array member list, in one new buffer and
// with no allocation per element; every other byte is copied as it is.
// prefix must need no JSON escaping. An element whose field is missing or
// not a string is an error.
func PrefixItems(obj json.RawMessage, list, field, prefix string) (json.RawMessage, error) {
	start, end, ok := memberRange(obj, list)
	if !ok || bytes.Equal(obj[start:end], null) {
		return obj, nil
	}
	out := make([]byte, 0, len(obj)+len(obj)/8)
	out = append(out, obj[:start]...)
	out = append(out, '[')
	first := true
	err := EachElement(obj[start:end], func(e json.RawMessage) error {
		if !first {
			out = append(out, ',')
		}
		first = false
		vs, _, ok := memberRange(e, field)
		if !ok || e[vs] != '"' {
			return errors.New("an item has no string " + field)
		}
		out = append(out, e[:vs+1]...)
		out = append(out, prefix...)
		out = append(out, e[vs+1:]...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out = append(out, ']')
	return append(out, obj[end:]...), nil
}
