// Package uritemplate decides whether a URI could have been produced by an
// RFC 6570 template, which is how Manifold routes a read when URIs are not
// namespaced: the upstream whose template matches the URI serves it.
//
// Matching compiles the template into an anchored regular expression: literal
// text must appear verbatim and each expression matches the characters its
// operator may expand to (a simple `{var}` stops at '/', '?' and '#'; `{+var}`
// and `{#var}` take anything; `{/var}`, `{.var}`, `{;var}`, `{?var}` and
// `{&var}` match their prefixed segments). It answers "could match", which is
// what routing needs; it does not extract variables.
package uritemplate

import (
	"fmt"
	"regexp"
	"strings"
)

// Template is a compiled template.
type Template struct {
	raw string
	re  *regexp.Regexp
}

// Parse compiles s, rejecting unbalanced braces and unknown operators.
func Parse(s string) (*Template, error) {
	var b strings.Builder
	b.WriteString("^")
	rest := s
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return nil, fmt.Errorf("uritemplate %q: unbalanced '}'", s)
			}
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		if strings.IndexByte(rest[:open], '}') >= 0 {
			return nil, fmt.Errorf("uritemplate %q: unbalanced '}'", s)
		}
		b.WriteString(regexp.QuoteMeta(rest[:open]))
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("uritemplate %q: unclosed '{'", s)
		}
		expr := rest[open+1 : open+end]
		pat, err := exprPattern(expr)
		if err != nil {
			return nil, fmt.Errorf("uritemplate %q: %w", s, err)
		}
		b.WriteString(pat)
		rest = rest[open+end+1:]
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("uritemplate %q: %w", s, err)
	}
	return &Template{raw: s, re: re}, nil
}

var varName = regexp.MustCompile(`^([A-Za-z0-9_.]|%[0-9A-Fa-f]{2})+(\*|:[1-9][0-9]{0,3})?$`)

func exprPattern(expr string) (string, error) {
	if expr == "" {
		return "", fmt.Errorf("empty expression")
	}
	op := ""
	if strings.ContainsRune("+#./;?&", rune(expr[0])) {
		op, expr = expr[:1], expr[1:]
	} else if strings.ContainsRune("=,!@|", rune(expr[0])) {
		return "", fmt.Errorf("reserved operator %q", expr[0])
	}
	for _, v := range strings.Split(expr, ",") {
		if !varName.MatchString(v) {
			return "", fmt.Errorf("invalid variable %q", v)
		}
	}
	const seg = `[^/?#]*`
	switch op {
	case "":
		return seg, nil
	case "+":
		return `.*`, nil
	case "#":
		return `(#.*)?`, nil
	case ".":
		return `(\.[^/?#]*)*`, nil
	case "/":
		return `(/[^/?#]*)*`, nil
	case ";":
		return `(;[^/?#]*)*`, nil
	case "?":
		return `(\?[^#]*)?`, nil
	default: // "&"
		return `(&[^#]*)?`, nil
	}
}

// Match reports whether uri could be an expansion of t.
func (t *Template) Match(uri string) bool { return t.re.MatchString(uri) }

// String returns the template text.
func (t *Template) String() string { return t.raw }
