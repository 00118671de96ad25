package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Large results (a list page of hundreds of thousands of items) are read
// and rewritten here without decoding them: the functions below walk the
// bytes of JSON that was validated on its way in, and return slices of it
// or one new buffer, never a map per item.

// Elements splits a JSON array into its elements, as slices of raw. A null
// or empty input gives nil; anything but an array is an error.
func Elements(raw json.RawMessage) ([]json.RawMessage, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	out := []json.RawMessage{}
	err := EachElement(raw, func(e json.RawMessage) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errNoElement is an array with no value where an element must be: bytes
// that are not valid JSON (against the callers' contract), on which the
// scans stop rather than spin.
var errNoElement = errors.New("not valid JSON: no element where one must be")

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
	if !ok {
		return "", false
	}
	return StringValue(v)
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
		if i >= len(obj) {
			break // cut short: obj was not the valid JSON it must be
		}
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
		if end <= i {
			return errNoElement
		}
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
	out, err := AppendPrefixedItems(out, obj[start:end], field, prefix)
	if err != nil {
		return nil, err
	}
	return append(out, obj[end:]...), nil
}

// AppendPrefixedItems appends arr, a JSON array, to out with prefix put in
// front of the string member field of each element, as PrefixItems
// rewrites its list: the elements joined by bare commas, every other byte
// copied as it is. A null arr is appended as it is; anything else that is
// not an array, or an element whose field is missing or not a string, is
// an error.
func AppendPrefixedItems(out []byte, arr json.RawMessage, field, prefix string) ([]byte, error) {
	if t := bytes.TrimSpace(arr); bytes.Equal(t, null) {
		return append(out, arr...), nil
	}
	out = append(out, '[')
	first := true
	err := EachElement(arr, func(e json.RawMessage) error {
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
	return append(out, ']'), nil
}

// FilterItems returns obj with only those elements of its array member
// list that keep accepts. Nothing is decoded and nothing is allocated
// while every element is kept: obj itself is returned then (and when list
// is missing or null). Past the first element left out, the rest are
// spliced into one new buffer; every other byte is copied as it is. obj
// must be valid JSON. keep's error is returned, as is one for a list that
// is not an array, and for obj not an object (empty or null: no items).
func FilterItems(obj json.RawMessage, list string, keep func(item json.RawMessage) (bool, error)) (json.RawMessage, error) {
	if t := bytes.TrimSpace(obj); len(t) == 0 || string(t) == "null" {
		return obj, nil
	} else if t[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	start, end, ok := memberRange(obj, list)
	if !ok || bytes.Equal(obj[start:end], null) {
		return obj, nil
	}
	if obj[start] != '[' {
		return nil, fmt.Errorf("%q: not an array", list)
	}
	var out []byte // nil while every element so far is kept
	kept := false  // out holds an element
	for i := skipSpace(obj, start+1); i < end && obj[i] != ']'; {
		e := skipValue(obj, i)
		if e <= i {
			return nil, errNoElement
		}
		ok, err := keep(obj[i:e:e])
		switch {
		case err != nil:
			return nil, err
		case !ok && out == nil:
			// The first one left out: what came before it is kept as it is.
			out = make([]byte, 0, len(obj))
			out = append(out, obj[:start+1]...)
			prior := bytes.TrimRight(obj[start+1:i], " \t\r\n,")
			out = append(out, prior...)
			kept = len(bytes.TrimSpace(prior)) > 0
		case ok && out != nil:
			if kept {
				out = append(out, ',')
			}
			out, kept = append(out, obj[i:e]...), true
		}
		i = skipSpace(obj, e)
		if i < end && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	if out == nil {
		return obj, nil
	}
	out = append(out, ']')
	return append(out, obj[end:]...), nil
}

// IDSpan finds the id of the message msg, as the bytes msg[start:end], when
// it is a plain one: an integer of at most 15 digits without sign or
// leading zero, or a string of at most 64 letters, digits and "_.:-". msg
// need not be valid: whatever it is, a plain id in a valid message's place
// makes another valid message, whose Decode gives that id and all else
// alike. It is how a frontend knows two requests for one request but
// their ids (a repeated id member's last, as Decode reads it).
func IDSpan(msg []byte) (start, end int, ok bool) {
	start, end, ok = memberRange(msg, "id")
	if !ok || !plainID(msg[start:end]) {
		return 0, 0, false
	}
	return start, end, true
}

func plainID(id []byte) bool {
	switch {
	case len(id) >= 2 && len(id) <= 66 && id[0] == '"' && id[len(id)-1] == '"':
		for _, c := range id[1 : len(id)-1] {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || c == '_' || c == '.' || c == ':' || c == '-') {
				return false
			}
		}
		return true
	case len(id) >= 1 && len(id) <= 15 && (id[0] != '0' || len(id) == 1):
		for _, c := range id {
			if !isDigit(c) {
				return false
			}
		}
		return true
	}
	return false
}
