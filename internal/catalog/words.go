package catalog

import (
	"iter"
	"strings"
	"unicode"
	"unicode/utf8"
)

// words yields the words of s as the index counts them: each run of
// letters and digits, split again at camelCase boundaries, lowercased,
// without stop words and one-letter words, stemmed. With whole, a chunk
// that splits (a name such as test_simple_text or getFileInfo) is also
// yielded whole, lowercased, so that a query naming a tool exactly finds it
// first.
func words(s string, whole bool) iter.Seq[string] {
	return func(yield func(string) bool) {
		for chunk := range strings.FieldsSeq(s) {
			chunk = strings.TrimFunc(chunk, notWordRune)
			n := 0
			for piece := range pieces(chunk) {
				n++
				w := strings.ToLower(piece)
				if utf8.RuneCountInString(w) < 2 || stopWords[w] {
					continue
				}
				if !yield(stem(w)) {
					return
				}
			}
			if whole && n > 1 && !yield(strings.ToLower(chunk)) {
				return
			}
		}
	}
}

func notWordRune(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }

// pieces yields the runs of letters and digits of chunk, split before an
// upper-case letter that follows a lower-case one or a digit (fileInfo),
// and before the last of a run of capitals followed by a lower-case letter
// (HTTPServer).
func pieces(chunk string) iter.Seq[string] {
	return func(yield func(string) bool) {
		start := -1
		var prev rune
		for i, r := range chunk {
			if notWordRune(r) {
				if start >= 0 && !yield(chunk[start:i]) {
					return
				}
				start, prev = -1, r
				continue
			}
			if start >= 0 && camelBoundary(prev, r, chunk[i+utf8.RuneLen(r):]) {
				if !yield(chunk[start:i]) {
					return
				}
				start = i
			}
			if start < 0 {
				start = i
			}
			prev = r
		}
		if start >= 0 {
			yield(chunk[start:])
		}
	}
}

// camelBoundary says whether a new word starts at r, after prev and before
// rest.
func camelBoundary(prev, r rune, rest string) bool {
	if !unicode.IsUpper(r) {
		return false
	}
	if unicode.IsLower(prev) || unicode.IsDigit(prev) {
		return true
	}
	next, _ := utf8.DecodeRuneInString(rest)
	return unicode.IsUpper(prev) && unicode.IsLower(next)
}

// stem strips the commonest English inflections, so that "files", "file"
// and "filing" meet, as do "creates", "created" and "creating". It is
// deliberately crude (it is applied alike to tools and queries, so a stem
// need not be a word), and leaves short words alone.
func stem(w string) string {
	if len(w) <= 3 {
		return w
	}
	switch {
	case strings.HasSuffix(w, "sses"):
		w = w[:len(w)-2]
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") &&
		!strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:len(w)-1]
	}
	switch {
	case strings.HasSuffix(w, "ing") && len(w) > 5:
		w = w[:len(w)-3]
	case strings.HasSuffix(w, "ed") && len(w) > 4:
		w = w[:len(w)-2]
	}
	if len(w) > 3 && w[len(w)-1] == 'e' {
		w = w[:len(w)-1]
	}
	if n := len(w); n > 3 && w[n-1] == w[n-2] && isConsonant(w[n-1]) {
		w = w[:n-1]
	}
	return w
}

func isConsonant(c byte) bool {
	return c >= 'a' && c <= 'z' && !strings.ContainsRune("aeiouy", rune(c))
}

// stopWords say nothing about which tool is meant.
var stopWords = func() map[string]bool {
	m := make(map[string]bool)
	for w := range strings.FieldsSeq(`a an and are as at be by can could do does for from has have
		how i if in into is it its me my of on or our please should so than that the their them then
		there these this those to up us was we what when where which who whom why will with would you your`) {
		m[w] = true
	}
	return m
}()
