package upstream

import "path"

// Filter decides which of an upstream's tool or prompt names are served:
// those that match an Allow glob (every name when there is none) and no
// Deny glob. Globs are path.Match patterns ('*', '?', '[...]') matched
// against the upstream's own names, before any namespace prefix.
type Filter struct {
	Allow, Deny []string
}

// Admits reports whether name is served.
func (f Filter) Admits(name string) bool {
	if matchAny(f.Deny, name) {
		return false
	}
	return len(f.Allow) == 0 || matchAny(f.Allow, name)
}

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
