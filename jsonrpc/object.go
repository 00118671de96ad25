package jsonrpc

import (
	"encoding/json"
	"fmt"
)

// Object is a JSON object decoded one level deep. It is how Manifold edits a
// message it does not fully understand: the members it touches are decoded and
// replaced, every other member keeps its original bytes.
type Object map[string]json.RawMessage

// ParseObject decodes raw, which must be a JSON object (or empty or null,
// which give an empty Object).
func ParseObject(raw json.RawMessage) (Object, error) {
	o := Object{}
	if len(raw) == 0 || string(raw) == "null" {
		return o, nil
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if o == nil { // the input was null inside whitespace
		o = Object{}
	}
	return o, nil
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
	var s string
	if raw, ok := o[key]; ok && len(raw) > 0 && raw[0] == '"' {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

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
	sub, err := ParseObject(o[key])
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

// Marshal encodes o with its members in sorted order.
func (o Object) Marshal() json.RawMessage {
	b, err := json.Marshal(map[string]json.RawMessage(o))
	if err != nil {
		// Members are either parsed JSON or produced by json.Marshal, so this
		// only happens on a programming error.
		panic(fmt.Sprintf("jsonrpc: marshal object: %v", err))
	}
	return b
}
