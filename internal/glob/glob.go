// Package glob matches the names and URIs an endpoint's view selects.
//
// A pattern is path.Match's syntax with one difference: '*' matches any run
// of characters, '/' included, since the things matched are namespaced
// URIs (docs+file:///guides/a.md) as well as names. '?' matches one
// character, '[...]' one character of a class ('[^...]' or '[!...]' one
// outside it, 'a-z' a range), and '\' makes the next character literal.
// A pattern is compiled once, into an anchored regular expression, so
// matching costs what the regexp package's linear-time matcher costs and
// no pattern can make it backtrack.
package glob

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Glob is a compiled pattern.
type Glob struct {
	text string
	re   *regexp.Regexp
}

// MaxLen bounds a pattern.
const MaxLen = 1024

// Compile compiles pattern, or says what is wrong with it.
func Compile(pattern string) (*Glob, error) {
	if pattern == "" {
		return nil, errors.New("empty pattern")
	}
	if len(pattern) > MaxLen {
		return nil, fmt.Errorf("pattern longer than %d bytes", MaxLen)
	}
	var b strings.Builder
	b.WriteString(`(?s)^`)
	rs := []rune(pattern)
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(rs) {
				return nil, errors.New(`a trailing \ escapes nothing`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '[':
			end, err := class(rs, i, &b)
			if err != nil {
				return nil, err
			}
			i = end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("invalid pattern: %w", err)
	}
	return &Glob{text: pattern, re: re}, nil
}

// class writes the class starting at rs[start] ('[') and returns the index
// of its closing ']'.
func class(rs []rune, start int, b *strings.Builder) (int, error) {
	i := start + 1
	b.WriteByte('[')
	if i < len(rs) && (rs[i] == '^' || rs[i] == '!') {
		b.WriteByte('^')
		i++
	}
	members := 0
	for ; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == ']' && members > 0:
			b.WriteByte(']')
			return i, nil
		case c == '\\':
			if i+1 == len(rs) {
				return 0, errors.New(`a trailing \ escapes nothing`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case c == '-' && members > 0 && i+1 < len(rs) && rs[i+1] != ']':
			b.WriteByte('-')
			continue // the range's end is the next member
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
		members++
	}
	return 0, errors.New("unterminated [ class")
}

// Match reports whether s matches the whole pattern.
func (g *Glob) Match(s string) bool { return g.re.MatchString(s) }

// String is the pattern as written.
func (g *Glob) String() string { return g.text }

// Set is an allow and a deny list: it admits what matches an allow pattern
// (anything, when there is none) and no deny pattern. The zero Set admits
// everything.
type Set struct {
	allow, deny []*Glob
}

// NewSet compiles allow and deny.
func NewSet(allow, deny []string) (Set, error) {
	var s Set
	for _, l := range []struct {
		dst  *[]*Glob
		src  []string
		name string
	}{{&s.allow, allow, "allow"}, {&s.deny, deny, "deny"}} {
		for i, p := range l.src {
			g, err := Compile(p)
			if err != nil {
				return Set{}, fmt.Errorf("%s[%d] %q: %w", l.name, i, p, err)
			}
			*l.dst = append(*l.dst, g)
		}
	}
	return s, nil
}

// Empty reports whether s admits everything without looking.
func (s Set) Empty() bool { return len(s.allow) == 0 && len(s.deny) == 0 }

// Admits reports whether s admits name.
func (s Set) Admits(name string) bool {
	for _, g := range s.deny {
		if g.Match(name) {
			return false
		}
	}
	if len(s.allow) == 0 {
		return true
	}
	for _, g := range s.allow {
		if g.Match(name) {
			return true
		}
	}
	return false
}

// Allow and Deny return the patterns as written.
func (s Set) Allow() []string { return texts(s.allow) }
func (s Set) Deny() []string  { return texts(s.deny) }

func texts(gs []*Glob) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.text
	}
	return out
}
