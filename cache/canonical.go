package cache

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// isCanonical reports whether raw is already what canonical would make of
// it, so that hashing it as written keys it as canonical would: compact,
// members in strictly increasing order at every depth, strings of
// printable ASCII that encoding/json writes as they are, numbers that
// canonicalNumber leaves alone (integers that end in no zero). What a
// client sends in `_meta` (its capabilities) mostly is, and decoding it
// again for every request was most of a hit's key. Anything else is left
// to canonical: a miss at worst, never a wrong hit, since one text is one
// value.
func isCanonical(raw []byte) bool {
	rest, ok := canonicalValue(raw, 0)
	return ok && len(rest) == 0
}

// canonicalValue checks the value raw starts with and returns what
// follows it.
func canonicalValue(raw []byte, depth int) ([]byte, bool) {
	if len(raw) == 0 || depth > 32 {
		return nil, false
	}
	switch c := raw[0]; {
	case c == '{':
		return canonicalObject(raw[1:], depth)
	case c == '[':
		raw = raw[1:]
		if len(raw) > 0 && raw[0] == ']' {
			return raw[1:], true
		}
		for {
			var ok bool
			if raw, ok = canonicalValue(raw, depth+1); !ok || len(raw) == 0 {
				return nil, false
			}
			if raw[0] == ']' {
				return raw[1:], true
			}
			if raw[0] != ',' {
				return nil, false
			}
			raw = raw[1:]
		}
	case c == '"':
		_, rest, ok := plainString(raw)
		return rest, ok
	case c == '-' || c >= '1' && c <= '9':
		return plainInteger(raw)
	}
	for _, lit := range literals {
		if bytes.HasPrefix(raw, lit) {
			return raw[len(lit):], true
		}
	}
	return nil, false
}

var literals = [][]byte{[]byte("true"), []byte("false"), []byte("null"), []byte("0")}

func canonicalObject(raw []byte, depth int) ([]byte, bool) {
	if len(raw) > 0 && raw[0] == '}' {
		return raw[1:], true
	}
	var last []byte
	for i := 0; ; i++ {
		key, rest, ok := plainString(raw)
		if !ok || len(rest) == 0 || rest[0] != ':' || i > 0 && bytes.Compare(last, key) >= 0 {
			return nil, false
		}
		if raw, ok = canonicalValue(rest[1:], depth+1); !ok || len(raw) == 0 {
			return nil, false
		}
		last = key
		switch raw[0] {
		case '}':
			return raw[1:], true
		case ',':
			raw = raw[1:]
		default:
			return nil, false
		}
	}
}

// plainString reads a string that encoding/json writes as it is: no
// escapes, no control or non-ASCII bytes, none of its HTML escapes.
func plainString(raw []byte) (body, rest []byte, ok bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			return raw[1:i], raw[i+1:], true
		case c < 0x20 || c > 0x7e || c == '\\' || c == '<' || c == '>' || c == '&':
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// plainInteger reads an integer canonicalNumber keeps as written: no
// leading or trailing zero, no fraction or exponent (0 is read as a
// literal by the caller).
func plainInteger(raw []byte) ([]byte, bool) {
	i := 0
	if raw[0] == '-' {
		i = 1
	}
	if i >= len(raw) || raw[i] < '1' || raw[i] > '9' {
		return nil, false
	}
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		i++
	}
	if raw[i-1] == '0' || i < len(raw) && (raw[i] == '.' || raw[i] == 'e' || raw[i] == 'E') {
		return nil, false
	}
	return raw[i:], true
}

// canonical re-encodes JSON with object members sorted at every depth,
// strings in one spelling and numbers in one form each (canonicalNumber):
// two encodings of the same value are the same bytes, and two values are
// never. Text that decoding would not keep exactly, a surrogate escape
// (a lone \ud800 becomes U+FFFD, where JavaScript keeps it) or bytes that
// are not UTF-8, is hashed as written: a miss, never another's answer.
// (No re-encoding has either, so as written it meets none.)
func canonical(raw []byte) (json.RawMessage, error) {
	if !utf8.Valid(raw) || surrogateEscape(raw) {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(canonicalNumbers(v))
}

// surrogateEscape reports a \uD800-\uDFFF in raw (or what looks like
// one after an escaped backslash: a miss at worst).
func surrogateEscape(raw []byte) bool {
	for {
		i := bytes.Index(raw, []byte(`\u`))
		if i < 0 || i+3 >= len(raw) {
			return false
		}
		if c, d := raw[i+2]|0x20, raw[i+3]|0x20; c == 'd' && (d >= '8' && d <= '9' || d >= 'a' && d <= 'f') {
			return true
		}
		raw = raw[i+2:]
	}
}

func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return canonicalNumber(x)
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumbers(e)
		}
	}
	return v
}

// canonicalNumber writes a JSON number exactly, in one form: its
// significant digits and a power of ten (1.50 and 15e-1 are both 15e-1, 0
// and -0.0 are 0). No precision is lost, so different numbers never meet.
// A number whose exponent does not fit an int stays as written.
func canonicalNumber(n json.Number) json.Number {
	s := string(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 1<<40 || e < -(1<<40) {
			return n
		}
		mant, exp = s[:i], e
	}
	if whole, frac, ok := strings.Cut(mant, "."); ok {
		mant, exp = whole+frac, exp-len(frac)
	}
	mant = strings.TrimLeft(mant, "0")
	trimmed := strings.TrimRight(mant, "0")
	exp += len(mant) - len(trimmed)
	if trimmed == "" {
		return "0"
	}
	if neg {
		trimmed = "-" + trimmed
	}
	if exp == 0 {
		return json.Number(trimmed)
	}
	return json.Number(trimmed + "e" + strconv.Itoa(exp))
}
