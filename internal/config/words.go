package config

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The operator's side of a problem: what a value should have been, in the
// words of the file (a duration, a whole number), never the decoder's
// types; and every problem in the order of the file, whichever pass found
// it.

// notA says what a scalar that would not decode as t should have been.
func notA(n *yaml.Node, t reflect.Type, err error) string {
	v := shown(n)
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return v + " is not a duration (a number with a unit: 500ms, 30s, 5m, 1h)"
	case t == reflect.TypeFor[ByteSize]():
		return v + " is not a size (bytes, or a number with KiB, MiB or GiB)"
	case t.Kind() == reflect.Bool:
		return v + " is not true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		if _, err := strconv.ParseInt(n.Value, 0, 64); err == nil || strings.Trim(n.Value, "0123456789-+") == "" {
			return v + " is out of range"
		}
		return v + " is not a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return v + " is not a number"
	case t.Kind() == reflect.String:
		return v + " is not text"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.Contains(msg, "line ") {
		msg = msg[i+2:]
	}
	return msg
}

// shown is a scalar as the file wrote it: quoted when it is text.
func shown(n *yaml.Node) string {
	if n.ShortTag() == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// inFileOrder sorts problems by the line of their key in data: a key's
// own, or that of the nearest enclosing key the file has (a required key
// left out is reported where its mapping starts); a problem about a key
// the file does not have at all comes last.
func inFileOrder(data []byte, problems []Problem) []Problem {
	var root yaml.Node
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&root) != nil {
		return problems
	}
	lines := map[string]int{}
	indexLines(&root, "", lines)
	line := func(p Problem) int {
		if p.Path == "" {
			return 0
		}
		for path := p.Path; path != ""; path = parentPath(path) {
			if l, ok := lines[path]; ok {
				return l
			}
		}
		return math.MaxInt
	}
	slices.SortStableFunc(problems, func(a, b Problem) int { return cmp.Compare(line(a), line(b)) })
	return problems
}

// indexLines records the line of every key and list item under n.
func indexLines(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			indexLines(c, path, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			lines[p] = n.Content[i].Line
			indexLines(n.Content[i+1], p, lines)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = c.Line
			indexLines(c, p, lines)
		}
	}
}

// parentPath is the path of the key enclosing path's: upstreams[1] of
// upstreams[1].url, upstreams of upstreams[1]; "" at the top.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}
