package uritemplate

import (
	"fmt"
	"strings"
	"testing"
)

// Whatever a template expands to (RFC 6570 level 3, the value given to
// every variable), it matches; and matching any string is safe.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{"file:///{path}", "test://{+path}", "api://x{/a,b}{?q,r}{#f}", "u{.ext}{;p}{&more}", "{var:3}/{list*}"} {
		f.Add(s, "a b/c?d#e", "file:///x")
	}
	f.Fuzz(func(t *testing.T, tmpl, value, uri string) {
		tp, err := Parse(tmpl)
		if err != nil {
			return
		}
		tp.Match(uri)
		if x := expand(tmpl, value); !tp.Match(x) {
			t.Fatalf("template %q does not match its expansion %q", tmpl, x)
		}
	})
}

// expand is an RFC 6570 expansion of a template that parses, with value for
// every variable, written independently of the matcher.
func expand(tmpl, value string) string {
	var b strings.Builder
	for tmpl != "" {
		open := strings.IndexByte(tmpl, '{')
		if open < 0 {
			b.WriteString(tmpl)
			break
		}
		b.WriteString(tmpl[:open])
		end := strings.IndexByte(tmpl[open:], '}')
		b.WriteString(expandExpr(tmpl[open+1:open+end], value))
		tmpl = tmpl[open+end+1:]
	}
	return b.String()
}

// operators holds, per operator, what starts an expansion, what separates
// its variables, whether they are named, and whether reserved characters
// pass (RFC 6570 appendix A).
var operators = map[string]struct {
	first, sep      string
	named, reserved bool
}{
	"": {"", ",", false, false}, "+": {"", ",", false, true}, "#": {"#", ",", false, true},
	".": {".", ".", false, false}, "/": {"/", "/", false, false}, ";": {";", ";", true, false},
	"?": {"?", "&", true, false}, "&": {"&", "&", true, false},
}

func expandExpr(expr, value string) string {
	op := ""
	if strings.ContainsRune("+#./;?&", rune(expr[0])) {
		op, expr = expr[:1], expr[1:]
	}
	o := operators[op]
	var parts []string
	for _, v := range strings.Split(expr, ",") {
		part := encode(value, o.reserved)
		if o.named {
			name, _, _ := strings.Cut(strings.TrimSuffix(v, "*"), ":")
			part = name + "=" + part
		}
		parts = append(parts, part)
	}
	return o.first + strings.Join(parts, o.sep)
}

// encode percent-encodes what an expansion may not carry literally.
func encode(s string, reserved bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("-._~", c) >= 0:
			b.WriteByte(c)
		case reserved && strings.IndexByte(":/?#[]@!$&'()*+,;=", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
