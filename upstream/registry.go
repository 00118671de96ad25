package upstream

import (
	"sync"
	"sync/atomic"
)

// Registry holds the set of upstreams every request is served from. The set
// is immutable and replaced whole: a reload builds the new set beside the old
// one and swaps a pointer, so a request that took a set finishes on it, and
// never sees half of a change.
//
// What is computed from the configured upstreams lives with the set, so
// that a reload, which makes a new set, makes it anew: what a package learns
// of a set goes in the set's memo (Memo), and what must react to a change
// of set (the watches of open subscriptions, the freshness of a replaced
// upstream's cached answers) is told inside the swap (OnSwap). Nothing can
// then refer to an upstream the current set does not hold.
type Registry struct {
	cur atomic.Pointer[Set]

	mu     sync.Mutex // serializes swaps, and their observers
	onSwap []func(old, next *Set)
}

// NewRegistry returns a registry holding ups, in configuration order.
func NewRegistry(ups []*Upstream) *Registry {
	r := &Registry{}
	r.cur.Store(NewSet(ups))
	return r
}

// Load returns the current set.
func (r *Registry) Load() *Set { return r.cur.Load() }

// Swap makes s the current set, tells the OnSwap observers, and returns
// the set it replaced.
func (r *Registry) Swap(s *Set) *Set {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Swap(s)
	for _, f := range r.onSwap {
		f(old, s)
	}
	return old
}

// OnSwap adds f to what each Swap calls, after the new set is current, in
// the order added. Swaps are serialized, so f sees them one at a time.
func (r *Registry) OnSwap(f func(old, next *Set)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onSwap = append(r.onSwap, f)
}

// Set is a fixed list of upstreams in configuration order: the merge order,
// and the order in which a URI or name two upstreams share is resolved.
type Set struct {
	all    []*Upstream
	names  []string
	byName map[string]*Upstream
	// restricted: some upstream has access rules.
	restricted bool
	// root is the configured set a view (For, In) was made of; itself for
	// a configured set. Views share its memo.
	root *Set
	memo *sync.Map // key → *memoEntry
	// view is the endpoint's view it was narrowed to (In); nil: none.
	view *View
	// seq tells the configured sets apart (Seq).
	seq uint64
}

// sets numbers the configured sets made in this process.
var sets atomic.Uint64

type memoEntry struct {
	once sync.Once
	v    any
}

// NewSet returns the set of ups, in that order.
func NewSet(ups []*Upstream) *Set {
	s := newSet(ups)
	s.root, s.memo, s.seq = s, &sync.Map{}, sets.Add(1)
	return s
}

// Seq is the number of the configured set s was made of, unique in the
// process: what holds it names a set without keeping it alive.
func (s *Set) Seq() uint64 { return s.root.seq }

func newSet(ups []*Upstream) *Set {
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
	v := newSet(ups)
	v.root, v.memo, v.view = s.root, s.memo, s.view
	return v
}

// Memo returns what build made of the configured set (the one a view was
// made of) under key, building it on first use: one value per set and key,
// shared by every view of the set, and gone with the set.
func (s *Set) Memo(key any, build func(root *Set) any) any {
	e, ok := s.memo.Load(key)
	if !ok { // the entry is allocated once, not on every lookup
		e, _ = s.memo.LoadOrStore(key, &memoEntry{})
	}
	m := e.(*memoEntry)
	m.once.Do(func() { m.v = build(s.root) })
	return m.v
}

// All returns the upstreams in order. The slice must not be modified.
func (s *Set) All() []*Upstream { return s.all }

// Names returns the upstreams' names in order. The slice must not be
// modified.
func (s *Set) Names() []string { return s.names }

// Get returns the upstream called name, or nil.
func (s *Set) Get(name string) *Upstream { return s.byName[name] }
