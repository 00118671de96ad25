package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// checkRead tells why res, an upstream's complete resources/read result,
// is not one Manifold may pass on or keep, or nil. A complete read carries
// its contents, an array (empty for a resource without content: a missing
// resource is an error, never empty contents), whose every item is an
// object with a string uri, a string text if it has one, and a blob in
// base64 (RFC 4648 §4, padded) if it has one. An input_required result
// carries no contents. res is valid JSON; nothing is allocated unless a
// blob's string holds escapes.
func checkRead(res []byte) error {
	var buf [16]jsonrpc.MemberRange
	members, err := jsonrpc.Members(res, buf[:0])
	if err != nil {
		return err
	}
	var contents []byte
	for _, m := range members {
		switch {
		case jsonrpc.KeyIs(m.Key, "resultType") && !jsonrpc.IsString(m.Value, mcp.ResultTypeComplete) && len(m.Value) > 2 && m.Value[0] == '"':
			return nil // not a complete result (decorate reads resultType alike)
		case jsonrpc.KeyIs(m.Key, "contents"):
			contents = m.Value
		}
	}
	if len(contents) == 0 || contents[0] != '[' {
		return errors.New("no contents array")
	}
	i := 0
	return jsonrpc.EachElement(contents, func(item json.RawMessage) error {
		err := checkContent(item)
		if err != nil {
			err = fmt.Errorf("contents[%d]: %w", i, err)
		}
		i++
		return err
	})
}

// checkContent checks one item of a read's contents.
func checkContent(item []byte) error {
	var buf [8]jsonrpc.MemberRange
	members, err := jsonrpc.Members(item, buf[:0])
	if err != nil || item[0] != '{' {
		return errors.New("not an object")
	}
	hasURI := false
	for _, m := range members {
		switch {
		case jsonrpc.KeyIs(m.Key, "uri"):
			hasURI = m.Value[0] == '"'
		case jsonrpc.KeyIs(m.Key, "text") && m.Value[0] != '"':
			return errors.New("text is not a string")
		case jsonrpc.KeyIs(m.Key, "blob") && !isBase64(m.Value):
			return errors.New("blob is not base64")
		}
	}
	if !hasURI {
		return errors.New("no string uri")
	}
	return nil
}

// isBase64 reports whether the JSON value v is a string of base64 in the
// standard alphabet with its padding, line breaks allowed as
// encoding/base64 allows them (MIME encoders write them). A scan of the
// bytes as they are; a string with escapes (an encoder may write "\/", and
// a line break is one) is decoded first.
func isBase64(v []byte) bool {
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	if bytes.IndexByte(v, '\\') >= 0 {
		d, ok := jsonrpc.StringValue(v)
		return ok && base64Body([]byte(d))
	}
	return base64Body(v[1 : len(v)-1])
}

// base64Body is isBase64 of the string's bytes themselves.
func base64Body(s []byte) bool {
	n := 0 // characters of the alphabet
	for n < len(s) && base64Alphabet[s[n]] {
		n++
	}
	if n == len(s) {
		return n%4 == 0 // the common case: one run, no padding, no break
	}
	pad := 0 // then of padding
	for _, c := range s[n:] {
		switch {
		case c == '\r' || c == '\n':
		case c == '=' && pad < 2:
			pad++
		case pad == 0 && base64Alphabet[c]:
			n++
		default:
			return false
		}
	}
	return (n+pad)%4 == 0 && (pad == 0 || n%4 != 0)
}

// base64Alphabet holds the bytes of the standard alphabet.
var base64Alphabet = func() (a [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
		a[c] = true
	}
	return a
}()
