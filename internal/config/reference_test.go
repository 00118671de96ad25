package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// docs/configuration.md's table of keys is held to the configuration
// types: every key a file may set has its row, and every row names a key
// that exists. Rows may also name a key that holds others (`upstreams[].oauth`).
func TestReferenceNamesEveryKey(t *testing.T) {
	documented := documentedKeys(t, "../../docs/configuration.md")
	leaves, all := keyPaths(reflect.TypeFor[Config]())
	for _, k := range leaves {
		if !documented[k] {
			t.Errorf("docs/configuration.md has no row for the key %s", k)
		}
	}
	for k := range documented {
		if !slices.Contains(all, k) {
			t.Errorf("docs/configuration.md has a row for %s, which is no key of the configuration", k)
		}
	}
}

// The walk of the types finds keys at every depth and shape.
func TestKeyPathsShapes(t *testing.T) {
	leaves, all := keyPaths(reflect.TypeFor[Config]())
	for _, k := range []string{"listen", "cache.memory.max_bytes", "upstreams[].headers", "upstreams[].oauth.idp.token_endpoint", "admin.operators[].values", "endpoints[].resources.allow", "limits.per_principal.burst"} {
		if !slices.Contains(leaves, k) {
			t.Errorf("%s is not among the keys found: %v", k, leaves)
		}
	}
	if !slices.Contains(all, "upstreams[].oauth") || slices.Contains(leaves, "upstreams[].oauth") {
		t.Errorf("upstreams[].oauth should be a key that holds others")
	}
}

// keysSection is the heading of the table the test reads.
const keysSection = "## Every key"

var keyRow = regexp.MustCompile("^\\| `([^`]+)` \\|")

// documentedKeys are the first cells of the rows of the page's table of
// keys (the section under keysSection).
func documentedKeys(t *testing.T, page string) map[string]bool {
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(text), "\n"+keysSection+"\n")
	if !found {
		t.Fatalf("%s has no section %q", page, keysSection)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	keys := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if m := keyRow.FindStringSubmatch(line); m != nil {
			if keys[m[1]] {
				t.Errorf("%s has two rows for %s", page, m[1])
			}
			keys[m[1]] = true
		}
	}
	if len(keys) == 0 {
		t.Fatalf("%s: no rows under %q", page, keysSection)
	}
	return keys
}

// keyPaths walks a configuration type by its yaml tags: leaves are the keys
// that hold a value, all adds those that hold other keys. A slice of
// structs is `name[].key`, a map of structs `name.*.key`.
func keyPaths(typ reflect.Type) (leaves, all []string) {
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			path := prefix + name
			all = append(all, path)
			ft := derefType(f.Type)
			switch {
			case isStruct(ft):
				walk(path+".", ft)
			case (ft.Kind() == reflect.Slice) && isStruct(derefType(ft.Elem())):
				walk(path+"[].", derefType(ft.Elem()))
			case ft.Kind() == reflect.Map && isStruct(derefType(ft.Elem())):
				walk(path+".*.", derefType(ft.Elem()))
			default:
				leaves = append(leaves, path)
			}
		}
	}
	walk("", typ)
	return leaves, all
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isStruct is a struct of keys, not a value written as one scalar.
func isStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]()
}
