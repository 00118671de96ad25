package oauth

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"
)

// held is what one replica holds of its principals' grants, in front of
// the store: the newest grant it knows of each (by version: an older one
// never replaces it), those the store could not take yet (stored by flush
// once it is back: a grant the authorization server issued is never lost
// to a store outage, and its spent predecessor never comes back from the
// store), and the refresh tokens it saw rotated away, which it never sends
// again.
type held struct {
	mu      sync.Mutex
	grants  map[string]*grant // principal → its newest grant known here
	unsaved map[string]*grant // principal → its grant the store has not taken
	spent   map[[sha256.Size]byte]struct{}
}

// maxGrantsInMemory bounds the grants a replica keeps in front of the
// store (and the refresh tokens it remembers spent); past it, the map
// starts again (the store still has them), but for the grants the store
// has not taken yet, which are bounded on their own.
const maxGrantsInMemory = 100_000

func newHeld() *held {
	return &held{grants: map[string]*grant{}, unsaved: map[string]*grant{}, spent: map[[sha256.Size]byte]struct{}{}}
}

// get is principal's grant held here, nil for none.
func (h *held) get(principal string) *grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.grants[principal]
}

// put holds g for principal unless a newer grant is held; it returns the
// grant held afterwards.
func (h *held) put(principal string, g *grant) *grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.grants[principal]; cur != nil && cur.Version > g.Version {
		return cur
	}
	if len(h.grants) >= maxGrantsInMemory {
		h.grants = map[string]*grant{}
		for p, u := range h.unsaved {
			h.grants[p] = u
		}
	}
	h.grants[principal] = g
	return g
}

// remove forgets principal's grant if the one held is g's version or
// older (a newer one is not what was refused).
func (h *held) remove(principal string, version int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.grants[principal]; cur != nil && cur.Version <= version {
		delete(h.grants, principal)
	}
	if u := h.unsaved[principal]; u != nil && u.Version <= version {
		delete(h.unsaved, principal)
	}
}

// unsave marks g as not yet in the store; false past the bound.
func (h *held) unsave(principal string, g *grant) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.unsaved[principal]; !ok && len(h.unsaved) >= maxGrantsInMemory {
		return false
	}
	h.unsaved[principal] = g
	return true
}

// saved clears the mark of principal's grant at version (a newer grant
// marked since stays marked).
func (h *held) saved(principal string, version int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u := h.unsaved[principal]; u != nil && u.Version <= version {
		delete(h.unsaved, principal)
	}
}

// toSave is a copy of the grants the store has not taken.
func (h *held) toSave() map[string]*grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*grant, len(h.unsaved))
	for p, g := range h.unsaved {
		out[p] = g
	}
	return out
}

// markSpent remembers refresh as rotated away.
func (h *held) markSpent(refresh string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.spent) >= maxGrantsInMemory {
		h.spent = map[[sha256.Size]byte]struct{}{}
	}
	h.spent[sha256.Sum256([]byte(refresh))] = struct{}{}
}

// isSpent reports whether refresh was rotated away.
func (h *held) isSpent(refresh string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.spent[sha256.Sum256([]byte(refresh))]
	return ok
}

// takeOver holds what old held (a client of the same configuration that
// a reload replaced): its grants, the store's missing ones included, and
// its spent refresh tokens.
func (h *held) takeOver(old *held) {
	old.mu.Lock()
	defer old.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grants, h.unsaved, h.spent = old.grants, old.unsaved, old.spent
	old.grants, old.unsaved, old.spent = map[string]*grant{}, map[string]*grant{}, map[[sha256.Size]byte]struct{}{}
}

// flushEvery spaces the attempts to store what the store could not take.
const flushEvery = time.Second

// flushSoon starts storing the grants the store has not taken, once a
// flushEvery, until it has them all or the client is closed.
func (c *Client) flushSoon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flushing || c.closed {
		return
	}
	c.flushing = true
	c.flushes.Go(func() {
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-t.C:
			}
			if c.flush(context.Background()) == 0 {
				c.mu.Lock()
				idle := len(c.held.toSave()) == 0
				c.flushing = !idle
				c.mu.Unlock()
				if idle {
					return
				}
			}
		}
	})
}

// flush stores what the store has not taken, until it fails; it returns
// how many are left.
func (c *Client) flush(ctx context.Context) int {
	pending := c.held.toSave()
	left := len(pending)
	for principal, g := range pending {
		if err := c.store(ctx, principal, g); err != nil {
			return left
		}
		c.held.saved(principal, g.Version)
		left--
	}
	return left
}
