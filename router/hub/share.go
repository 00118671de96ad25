package hub

import "github.com/manifold-mcp/manifold/internal/jsonrpc"

// A principal's share. The bounds (MaxStreams, MaxBytes, MaxWatched) are
// shared by every caller, and a caller that filled one would have every
// other caller refused: opening streams, or naming resources no one else
// names, until the bound is reached. So no one principal may hold more
// than a quarter of any of them; the rest stays for the others. Callers
// who do not authenticate are no principal: they are one crowd, bounded
// only together by the bounds themselves.
const shareDivisor = 4

// share is what one principal's open subscriptions hold.
type share struct {
	streams int
	bytes   int64
	uris    map[string]map[string]int // per upstream, the URIs its subscriptions name, each with how many name it
}

// part is a principal's part of bound (at least 1); 0 for no bound.
func part[N int | int64](bound N) N {
	if bound <= 0 {
		return 0
	}
	return max(1, bound/shareDivisor)
}

// watchedPart is a principal's part of an upstream's watched resources:
// a quarter, but never less than one stream may name (MaxURIs), so a
// principal can always hold one full listen.
func (h *Hub) watchedPart() int {
	limit := part(h.o.MaxWatched)
	if h.o.MaxURIs > 0 && limit > 0 {
		limit = max(limit, min(h.o.MaxURIs, h.o.MaxWatched))
	}
	return limit
}

// checkShare refuses s if, with it, its principal would hold more than its
// part of a bound. Called with mu held.
func (h *Hub) checkShare(s *Subscription) error {
	if s.principal == "" {
		return nil
	}
	sh := h.shares[s.principal]
	if sh == nil {
		sh = &share{}
	}
	if limit := part(h.o.MaxStreams); limit > 0 && sh.streams+1 > limit {
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "one caller may hold at most %d subscription streams, a quarter of subscriptions.max_streams; close one first", limit).
			WithData(map[string]any{"bound": "subscriptions.max_streams", "limit": limit})
	}
	if limit := part(h.o.MaxBytes); limit > 0 && sh.bytes+s.charge > limit {
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "one caller's subscriptions may hold at most a quarter of subscriptions.max_bytes; close one, or name fewer resources").
			WithData(map[string]any{"bound": "subscriptions.max_bytes", "limit": limit})
	}
	if limit := h.watchedPart(); limit > 0 {
		for name, uris := range s.uris {
			named := sh.uris[name]
			added := 0
			for _, inner := range uris {
				if named[inner] == 0 {
					added++
				}
			}
			if len(named)+added > limit {
				return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "one caller's subscriptions may name at most %d resources of upstream %s, a quarter of what one upstream watches (ten times subscriptions.max_uris_per_stream)", limit, name).
					WithData(map[string]any{"bound": "subscriptions.max_uris_per_stream", "limit": limit})
			}
		}
	}
	return nil
}

// take counts s in its principal's share; giveBack uncounts it. Called
// with mu held. A principal's resources are counted once however many of
// its subscriptions name them (three windows of one agent naming the same
// thousand are a thousand).
func (h *Hub) take(s *Subscription) {
	if s.principal == "" {
		return
	}
	sh := h.shares[s.principal]
	if sh == nil {
		if h.shares == nil {
			h.shares = map[string]*share{}
		}
		sh = &share{uris: map[string]map[string]int{}}
		h.shares[s.principal] = sh
	}
	sh.streams++
	sh.bytes += s.charge
	for name, uris := range s.uris {
		if sh.uris[name] == nil {
			sh.uris[name] = map[string]int{}
		}
		for _, inner := range uris {
			sh.uris[name][inner]++
		}
	}
}

func (h *Hub) giveBack(s *Subscription) {
	sh := h.shares[s.principal]
	if sh == nil {
		return
	}
	sh.streams--
	sh.bytes -= s.charge
	for name, uris := range s.uris {
		named := sh.uris[name]
		for _, inner := range uris {
			if named[inner]--; named[inner] <= 0 {
				delete(named, inner)
			}
		}
		if len(named) == 0 {
			delete(sh.uris, name)
		}
	}
	if sh.streams <= 0 {
		delete(h.shares, s.principal)
	}
}
