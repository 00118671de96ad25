package jsonrpc

import "encoding/binary"

// Valid reports whether b is one JSON value, exactly as encoding/json's
// Valid judges it (RFC 8259, strings' bytes not checked as UTF-8, nesting
// at most 10,000 deep), in one pass of plain loops: encoding/json's state
// machine, a call per byte, was half of a request's decoding. FuzzValid
// holds the two to the same verdicts. A message itself is checked by the
// same loops as Decode splits it (validInto), in the one pass.
func Valid(b []byte) bool {
	i, ok := validValue(b, skipSpace(b, 0), 0)
	return ok && skipSpace(b, i) == len(b)
}

// maxDepth is encoding/json's bound on nesting.
const maxDepth = 10000

// validValue checks the value at b[i] at nesting depth, and returns the
// index just past it.
func validValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '{':
		return validObject(b, i, depth+1)
	case c == '[':
		return validArray(b, i, depth+1)
	case c == '"':
		return validString(b, i)
	case c == '-' || c >= '0' && c <= '9':
		return validNumber(b, i)
	case c == 't':
		return validLiteral(b, i, "true")
	case c == 'f':
		return validLiteral(b, i, "false")
	case c == 'n':
		return validLiteral(b, i, "null")
	}
	return i, false
}

func validObject(b []byte, i, depth int) (int, bool) {
	if depth > maxDepth {
		return i, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, false
		}
		var ok bool
		if i, ok = validString(b, i); !ok {
			return i, false
		}
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return i, false
		}
		if i, ok = validValue(b, skipSpace(b, i+1), depth); !ok {
			return i, false
		}
		if i = skipSpace(b, i); i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return i, false
		}
	}
}

func validArray(b []byte, i, depth int) (int, bool) {
	if depth > maxDepth {
		return i, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = validValue(b, i, depth); !ok {
			return i, false
		}
		if i = skipSpace(b, i); i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ']':
			return i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return i, false
		}
	}
}

// validString checks the string at b[i] (its opening quote): no control
// character, and only JSON's escapes.
func validString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		if i = plainRun(b, i); i == len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			if i++; i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, false
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// plainRun returns the index of the first byte from b[i] on that a string
// cannot hold as it is (a quote, a backslash, a control character), or
// len(b). It tests eight bytes at a time, with the bit tricks that find a
// byte below n in a word (x-n·1 & ^x & 0x80·1, never missing one; a false
// alarm only ends the fast loop early): a resource's text is most of an
// answer, and validString's byte-by-byte loop was 1.8 µs of a 1 KiB read's
// hop (scripts/profile-hop). FuzzValid holds the verdicts.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q, bs := w^('"'*ones), w^('\\'*ones)
		if ((w-0x20*ones)&^w|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			break
		}
	}
	for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
		i++
	}
	return i
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// validNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func validNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && b[i]|0x20 == 'e' {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}

func validLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// decoded is what Decode split of a request's params as it checked them.
type decoded struct {
	from         []byte // the params they were split from
	params, meta Object
}

// validInto is validObject for the object at b[i] that also puts its
// members in o, as split does: the one pass that checks a message splits
// it. level 0 is the message, whose params object is split into d too, as
// is (level 1) their `_meta`. A repeated key keeps its last value, its
// split included.
func validInto(b []byte, i, depth int, o Object, d *decoded, level int) (int, bool) {
	if depth > maxDepth {
		return i, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, false
		}
		lit := i
		var ok bool
		if i, ok = validString(b, i); !ok {
			return i, false
		}
		key, err := internKey(b[lit:i])
		if err != nil {
			return i, false
		}
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return i, false
		}
		v := skipSpace(b, i+1)
		if i, ok = d.validMember(b, v, depth, key, level); !ok {
			return i, false
		}
		o[key] = b[v:i:i]
		if i = skipSpace(b, i); i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return i, false
		}
	}
}

// validMember checks the value of member key at b[v], splitting it into d
// when it is the params of a message or their `_meta`.
func (d *decoded) validMember(b []byte, v, depth int, key string, level int) (int, bool) {
	switch {
	case level == 0 && key == "params":
		d.params, d.meta = nil, nil
		if v < len(b) && b[v] == '{' {
			p := Object{}
			end, ok := validInto(b, v, depth+1, p, d, 1)
			d.params, d.from = p, b[v:end:end]
			return end, ok
		}
	case level == 1 && key == "_meta":
		d.meta = nil
		if v < len(b) && b[v] == '{' {
			m := Object{}
			end, ok := validInto(b, v, depth+1, m, d, 2)
			d.meta = m
			return end, ok
		}
	}
	return validValue(b, v, depth)
}
