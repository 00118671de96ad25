package upstream

import (
	"sync"
	"time"
)

// The sessions an upstream keeps are in one pool, each under what it
// belongs to (belongs): the server (the session negotiated for every
// caller), a revision (a legacy session of a caller's era, era.go), or a
// principal (a session of the caller's own, own.go). A call acquires the
// session it goes over and releases it when over; a session found no
// longer valid is dropped, whatever it belongs to, and close takes all.

// belongs names what a session is kept for; the zero value is the server.
type belongs struct {
	revision  string // a caller-era session's revision
	principal string // a principal's own session, where own is set
	own       bool   // (the anonymous principal's included)
}

// theServer is the negotiated session's place.
var theServer = belongs{}

func ofRevision(v string) belongs  { return belongs{revision: v} }
func ofPrincipal(p string) belongs { return belongs{principal: p, own: true} }

// pooled is a kept session, when it was last used, and the calls in it
// now; retired, it is ended once they are over.
type pooled struct {
	s       *session
	used    time.Time
	calls   int
	retired bool
}

type pool struct {
	alive func(gen uint64) bool // whether a session's channel still carries it
	end   func(*session)        // ends a session in the background
	// maxOwn bounds the principals' sessions kept: as many principals as
	// call, which callers control.
	maxOwn int

	mu     sync.Mutex
	kept   map[belongs]*pooled
	owned  int  // how many of kept are principals'
	closed bool // close ran: sessions kept later are ended at once
}

// get returns the session kept for b, nil if none.
func (p *pool) get(b belongs) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := p.kept[b]; k != nil {
		return k.s
	}
	return nil
}

// acquire counts a call in b's live session (want, if not nil: that one)
// and returns it with the function that ends the count; nil if there is
// none. A session the server no longer holds is still returned: the call
// finds out, and drops it.
func (p *pool) acquire(b belongs, want *session) (*session, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.kept[b]
	if k == nil || (want != nil && k.s != want) || !p.alive(k.s.gen) {
		if want != nil {
			return want, func() {} // kept no more (ended at close): its call still runs
		}
		return nil, nil
	}
	k.calls++
	k.used = time.Now()
	return k.s, func() { p.release(k) }
}

func (p *pool) release(k *pooled) {
	p.mu.Lock()
	k.calls--
	k.used = time.Now()
	end := k.retired && k.calls == 0
	p.mu.Unlock()
	if end {
		p.end(k.s)
	}
}

// put keeps s for b. A principal's session that b had before is ended,
// once no call is in it; to keep at most maxOwn, the least recently used
// principal's session with no call in it is ended too. After close, s is
// ended at once.
func (p *pool) put(b belongs, s *session) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.end(s)
		return
	}
	var ended []*session
	if old := p.kept[b]; old != nil {
		if b.own {
			ended = p.retire(old, ended)
		}
	} else if b.own && p.owned >= p.maxOwn {
		if lru, at := p.leastRecentlyUsed(); lru != nil {
			p.remove(at)
			ended = p.retire(lru, ended)
		}
	}
	if p.kept == nil {
		p.kept = map[belongs]*pooled{}
	}
	if p.kept[b] == nil && b.own {
		p.owned++
	}
	p.kept[b] = &pooled{s: s, used: time.Now()}
	p.mu.Unlock()
	for _, e := range ended {
		p.end(e)
	}
}

// leastRecentlyUsed is the principal's session with no call in it used
// longest ago, and where it is kept. Called with mu held.
func (p *pool) leastRecentlyUsed() (*pooled, belongs) {
	var lru *pooled
	var at belongs
	for b, k := range p.kept {
		if b.own && k.calls == 0 && (lru == nil || k.used.Before(lru.used)) {
			lru, at = k, b
		}
	}
	return lru, at
}

// retire appends k's session to ended if no call is in it; otherwise its
// last call ends it. Called with mu held.
func (p *pool) retire(k *pooled, ended []*session) []*session {
	if k.calls > 0 {
		k.retired = true
		return ended
	}
	return append(ended, k.s)
}

// remove forgets what b holds. Called with mu held.
func (p *pool) remove(b belongs) {
	if _, ok := p.kept[b]; ok && b.own {
		p.owned--
	}
	delete(p.kept, b)
}

// drop forgets s wherever it is kept, so that the next call of what it
// belonged to opens another; it reports whether it was kept.
func (p *pool) drop(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	found := false
	for b, k := range p.kept {
		if k.s == s {
			p.remove(b)
			found = true
		}
	}
	return found
}

// dropServer forgets the negotiated session if it is still s.
func (p *pool) dropServer(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := p.kept[theServer]; k != nil && k.s == s {
		p.remove(theServer)
	}
}

// close takes every session kept: the negotiated one, and the others
// (each once, the negotiated one among them when it is a principal's own
// too). Nothing is kept after.
func (p *pool) close() (server *session, others []*session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[*session]bool{}
	for b, k := range p.kept {
		if b == theServer {
			server = k.s
			continue
		}
		if !seen[k.s] {
			seen[k.s] = true
			others = append(others, k.s)
		}
	}
	p.kept, p.owned, p.closed = nil, 0, true
	return server, others
}
