package mcp

import "strings"

// NormalizeURI returns the form of uri that every equivalent spelling of it
// shares, for cache keys and invalidation tags: RFC 3986 §6.2.2 syntax-based
// normalization (scheme and host lowercased, percent-encodings of
// unreserved characters decoded and the others uppercased, dot segments
// removed, an empty port dropped), and for file URIs an empty or
// "localhost" authority spelt the same way (RFC 8089: file:/a, file:///a
// and file://localhost/a are one file). A read is asked upstream in this
// form too, so that what a cache entry holds is the answer to the question
// its key stands for.
func NormalizeURI(uri string) string {
	if alreadyNormal(uri) {
		return uri // the common case, read on every cache lookup: no copy
	}
	return normalize(uri)
}

// alreadyNormal reports, without allocating, that normalize would return
// uri unchanged: a lowercase scheme and host, no percent-encoding, no dot
// segment, no empty port, and not a file URI (whose authority and slashes
// have spellings of their own). It may say no to a normal URI, never yes
// to one normalize would change.
func alreadyNormal(uri string) bool {
	colon := strings.IndexByte(uri, ':')
	if colon < 1 || strings.IndexByte(uri, '%') >= 0 {
		return false
	}
	for i := 0; i < colon; i++ {
		if c := uri[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' && i > 0 || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	if scheme := uri[:colon]; scheme == "file" || strings.HasSuffix(scheme, "+file") {
		return false
	}
	rest := uri[colon+1:]
	if strings.HasPrefix(rest, "//") {
		end := strings.IndexAny(rest[2:], "/?#")
		if end < 0 {
			end = len(rest) - 2
		}
		host := rest[2 : 2+end]
		if strings.HasSuffix(host, ":") || strings.ContainsFunc(host[strings.LastIndexByte(host, '@')+1:], func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
			return false
		}
		rest = rest[2+end:]
	} else if strings.HasPrefix(rest, "/.") {
		return false
	}
	path := rest
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		path = rest[:i]
	}
	return !hasDotSegment(path)
}

// hasDotSegment reports a "." or ".." segment in path.
func hasDotSegment(path string) bool {
	for rest, more := path, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

func normalize(uri string) string {
	scheme, rest, ok := strings.Cut(uri, ":")
	if !ok || !validScheme(scheme) {
		return uri
	}
	scheme = lowerASCII(scheme)
	rest = percents(rest)
	var authority string
	hasAuthority := strings.HasPrefix(rest, "//")
	if hasAuthority {
		end := strings.IndexAny(rest[2:], "/?#")
		if end < 0 {
			end = len(rest) - 2
		}
		authority, rest = strings.TrimRight(lowerHost(rest[2:2+end]), ":"), rest[2+end:]
	}
	path, tail := rest, ""
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		path, tail = rest[:i], rest[i:]
	}
	path = removeDots(path)
	if scheme == "file" || strings.HasSuffix(scheme, "+file") {
		if authority == "localhost" {
			authority = ""
		}
		if strings.HasPrefix(path, "/") {
			hasAuthority = true
		}
	}
	if hasAuthority {
		return scheme + "://" + authority + path + tail
	}
	if strings.HasPrefix(path, "//") {
		// Removing dots left a path that would read as an authority
		// ("a:/.//b" → "a://b"); RFC 3986 §5.2.4 keeps it a path with "/.".
		path = "/." + path
	}
	return scheme + ":" + path + tail
}

// URITag is the invalidation tag of a URI: its normalized form without the
// fragment, which names a part of the resource, so that a change announced
// for the resource reaches a read of any part of it.
func URITag(uri string) string { return TagOfNormal(NormalizeURI(uri)) }

// TagOfNormal is URITag of a URI NormalizeURI already gave: it without its
// fragment.
func TagOfNormal(n string) string {
	if i := strings.IndexByte(n, '#'); i >= 0 {
		return n[:i]
	}
	return n
}

// percents decodes the percent-encodings of unreserved characters and
// uppercases the hex digits of the others. A '%' that starts no encoding
// stands for itself and is written %25: left bare, a decoded character
// after it could complete a new encoding ("%7%41" would become "%7A", then
// "z"), and normalizing twice would not give the same key.
func percents(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			b.WriteString("%25")
			continue
		}
		c := unhex(s[i+1])<<4 | unhex(s[i+2])
		if isUnreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(s[i+1:i+3]))
		}
		i += 2
	}
	return b.String()
}

// lowerHost lowercases the host of an authority, not its userinfo.
func lowerHost(authority string) string {
	at := strings.LastIndexByte(authority, '@')
	return authority[:at+1] + lowerASCII(authority[at+1:])
}

// lowerASCII lowercases A-Z only. Unicode case mapping would join
// spellings an upstream tells apart (the Kelvin sign lowercases to 'k').
func lowerASCII(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// validScheme is RFC 3986's ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ):
// what is not a URI is left as it is.
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alpha && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// removeDots is RFC 3986 §5.2.4.
func removeDots(path string) string {
	if !strings.Contains(path, ".") {
		return path
	}
	var out []string
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		switch seg {
		case ".":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 || len(out) == 1 && out[0] != "" {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	return strings.Join(out, "/")
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
