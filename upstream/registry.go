package upstream

import "sync/atomic"

// Registry holds the set of upstreams every request is served from. The set
// is immutable and replaced whole: a reload builds the new set beside the old
// one and swaps a pointer, so a request that took a set finishes on it, and
// never sees half of a change.
type Registry struct {
	cur atomic.Pointer[Set]
}

// NewRegistry returns a registry holding ups, in configuration order.
func NewRegistry(ups []*Upstream) *Registry {
	r := &Registry{}
	r.cur.Store(NewSet(ups))
	return r
}

// Load returns the current set.
func (r *Registry) Load() *Set { return r.cur.Load() }

// Swap makes s the current set and returns the one it replaces.
func (r *Registry) Swap(s *Set) *Set { return r.cur.Swap(s) }

// Set is a fixed list of upstreams in configuration order: the merge order,
// and the order in which a URI or name two upstreams share is resolved.
type Set struct {
	all    []*Upstream
	names  []string
	byName map[string]*Upstream
	// restricted: some upstream has access rules.
	restricted bool
}

// NewSet returns the set of ups, in that order.
func NewSet(ups []*Upstream) *Set {
	s := &Set{all: ups, names: make([]string, len(ups)), byName: make(map[string]*Upstream, len(ups))}
	for i, u := range ups {
		s.names[i] = u.Name()
		s.byName[u.Name()] = u
		s.restricted = s.restricted || len(u.o.Access) > 0
	}
	return s
}

// For returns the upstreams of s a principal with claims may use (nil
// claims: an unauthenticated caller), in order: s itself when that is all
// of them. Whoever serves a caller from this set cannot route, list or
// watch anything of the others, so nothing tells the caller they exist.
func (s *Set) For(claims map[string][]string) *Set {
	if !s.restricted {
		return s
	}
	var ups []*Upstream
	for _, u := range s.all {
		if u.Admits(claims) {
			ups = append(ups, u)
		}
	}
	if len(ups) == len(s.all) {
		return s
	}
	return NewSet(ups)
}

// All returns the upstreams in order. The slice must not be modified.
func (s *Set) All() []*Upstream { return s.all }

// Names returns the upstreams' names in order. The slice must not be
// modified.
func (s *Set) Names() []string { return s.names }

// Get returns the upstream called name, or nil.
func (s *Set) Get(name string) *Upstream { return s.byName[name] }
