package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

var typeOfConfig = reflect.TypeFor[Config]()

// envRef matches ${VAR} and ${VAR:-default}.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expand replaces environment references in every scalar value (not keys).
// Expanding the tree rather than the text keeps a value containing YAML
// syntax, such as a token with ": " in it, a plain string.
func expand(n *yaml.Node, path string, lookup func(string) (string, bool), problems *[]Problem) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			expand(c, path, lookup, problems)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			expand(n.Content[i+1], join(path, n.Content[i].Value), lookup, problems)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			expand(c, fmt.Sprintf("%s[%d]", path, i), lookup, problems)
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return
		}
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			if v, ok := lookup(m[1]); ok && v != "" {
				return v
			}
			if m[2] != "" {
				return m[3]
			}
			*problems = append(*problems, Problem{Path: path, Message: fmt.Sprintf("environment variable %s is not set", m[1])})
			return ""
		})
		// The parser typed the value from its unexpanded text (a string);
		// type it again from what it became, so `max: ${MAX}` is an
		// int. A quoted or explicitly tagged value keeps its type.
		if n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
			n.Tag = ""
		}
	}
}

// checkKeys walks n against t, reporting unknown keys, shape mismatches and
// values that do not decode, each at its own path. It clears each node it
// reports (see drop), so that the rest of the file still decodes and is
// validated in the same run.
func checkKeys(n *yaml.Node, t reflect.Type, path string, problems *[]Problem) {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			checkKeys(c, t, path, problems)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Tag == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(typeOfUnmarshaler) || t.Kind() != reflect.Struct && t.Kind() != reflect.Map && t.Kind() != reflect.Slice {
		checkLeaf(n, t, path, problems)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		checkStruct(n, t, path, problems)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			*problems = append(*problems, Problem{Path: path, Message: "must be a mapping"})
			drop(n)
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkKeys(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), problems)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			*problems = append(*problems, Problem{Path: path, Message: "must be a list"})
			drop(n)
			return
		}
		for i, c := range n.Content {
			checkKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), problems)
		}
	}
}

// checkStruct checks a mapping against the fields of struct type t.
func checkStruct(n *yaml.Node, t reflect.Type, path string, problems *[]Problem) {
	if n.Kind != yaml.MappingNode {
		*problems = append(*problems, Problem{Path: path, Message: "must be a mapping"})
		drop(n)
		return
	}
	fields := yamlFields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		p := join(path, key)
		ft, ok := fields[key]
		if why, gone := removedKey(t, key); !ok && gone {
			*problems = append(*problems, Problem{Path: p, Message: "removed; " + why})
			drop(n.Content[i+1])
			continue
		}
		if !ok {
			*problems = append(*problems, Problem{Path: p, Message: "unknown key" + suggest(key, fields)})
			drop(n.Content[i+1])
			continue
		}
		checkKeys(n.Content[i+1], ft, p, problems)
	}
}

var typeOfUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func checkLeaf(n *yaml.Node, t reflect.Type, path string, problems *[]Problem) {
	if n.Kind != yaml.ScalarNode {
		*problems = append(*problems, Problem{Path: path, Message: "must be a single value"})
		drop(n)
		return
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		*problems = append(*problems, Problem{Path: path, Message: notA(n, t, err)})
		drop(n)
	}
}

// drop makes a reported node null: it decodes as the zero value, which the
// defaults then fill, and validation problems it causes are not reported
// again (see covered).
func drop(n *yaml.Node) {
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}

// covered reports whether p is about a key already reported: the same
// path, one under it, or one above it (an upstream whose url did not
// decode also lacks a url).
func covered(reported []Problem, p Problem) bool {
	for _, r := range reported {
		if related(r.Path, p.Path) || related(p.Path, r.Path) {
			return true
		}
	}
	return false
}

// related reports whether path is parent or parent's descendant.
func related(parent, path string) bool {
	if parent == "" {
		return false
	}
	if !strings.HasPrefix(path, parent) {
		return false
	}
	rest := path[len(parent):]
	return rest == "" || rest[0] == '.' || rest[0] == '['
}

func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		m[name] = f.Type
	}
	return m
}

// suggest names the known key closest to a misspelt one, if any is close.
func suggest(key string, fields map[string]reflect.Type) string {
	best, bestDist := "", 3
	for name := range fields {
		if d := distance(strings.ToLower(key), name); d < bestDist || d == bestDist && name < best {
			best, bestDist = name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance, treating '-' like '_'.
func distance(a, b string) int {
	a = strings.ReplaceAll(a, "-", "_")
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
