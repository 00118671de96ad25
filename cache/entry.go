package cache

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// generation is the invalidation state an entry belongs to: how many times
// its tag was invalidated, and (in memory) how many times the tier was
// flushed. An entry is valid only while both are what they were when its
// fill started. (A whole upstream is never invalidated: when its changes may
// have been missed, its entries are made stale instead; see Revalidate.)
type generation struct {
	Tag   uint64 `json:"t,omitempty"`
	Epoch uint64 `json:"e,omitempty"`
}

// entry is one cached answer. It carries its own identity (key, scope,
// fingerprint) and the invalidation generation it was filled under, all
// checked on every read: a tier may hand back a value stored under another
// key (ristretto compares only hashes) or from before an invalidation.
type entry struct {
	key   string
	scope string
	fp    string
	// gen is the invalidation state when the entry's fill started.
	gen generation
	// body is the result without ttlMs and cacheScope, which are spliced in
	// when it is served.
	body []byte
	// expires ends freshness; staleUntil ends stale-if-error use.
	expires    time.Time
	staleUntil time.Time
	// filled is when the fill that produced it began: an entry filled
	// before its upstream's revalidate-before time is stale.
	filled time.Time
	// refreshing is set (atomically) by the reader that starts its
	// refresh ahead of expiry, so that only one does.
	refreshing int32
}

// cost is what the entry counts against the memory tier's byte budget.
func (e *entry) cost() int64 { return int64(len(e.body) + len(e.key) + len(e.fp) + 128) }

// result is the answer to serve: the body with the remaining time (never
// negative; 0 once stale) and the scope spliced in.
func (e *entry) result(now time.Time) json.RawMessage {
	return splice(e.body, remainingMs(e.expires, now), e.scope)
}

func remainingMs(expires, now time.Time) int64 {
	if d := expires.Sub(now); d > 0 {
		return int64(d / time.Millisecond)
	}
	return 0
}

// splice writes ttlMs and cacheScope at the front of body, a JSON object
// without them. It is the one per-hit edit of a cached result, so it is a
// byte copy rather than a decode and encode.
func splice(body []byte, ttlMs int64, scope string) json.RawMessage {
	out := make([]byte, 0, len(body)+48)
	out = append(out, `{"ttlMs":`...)
	out = strconv.AppendInt(out, ttlMs, 10)
	out = append(out, `,"cacheScope":"`...)
	out = append(out, scope...)
	out = append(out, '"')
	if len(body) > 2 { // more than "{}"
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}

// hints are a result's cache hints, normalised.
type hints struct {
	complete bool
	ttl      time.Duration
	scope    string
	body     []byte // the result without ttlMs and cacheScope
}

// parseHints reads the cache hints of a result and strips them from it.
func parseHints(result json.RawMessage) (hints, error) {
	obj, err := jsonrpc.ParseObject(result)
	if err != nil {
		return hints{}, err
	}
	var ttl float64
	if _, err := obj.Get("ttlMs", &ttl); err != nil {
		ttl = 0
	}
	h := hints{
		complete: obj.String("resultType") == mcp.ResultTypeComplete,
		ttl:      time.Duration(mcp.NormalizeTTL(ttl)) * time.Millisecond,
		scope:    mcp.NormalizeScope(obj.String("cacheScope")),
	}
	delete(obj, "ttlMs")
	delete(obj, "cacheScope")
	// What belonged to the request that filled the entry (its trace
	// context, its progress token) must not be replayed to the next caller.
	if meta, err := obj.Object("_meta"); err == nil && len(meta) > 0 {
		dropped := false
		for _, k := range requestScopedMeta {
			if _, ok := meta[k]; ok {
				delete(meta, k)
				dropped = true
			}
		}
		if dropped {
			obj["_meta"] = meta.Marshal()
		}
	}
	h.body = obj.Marshal()
	return h, nil
}

var requestScopedMeta = []string{mcp.MetaProgressToken, mcp.MetaTraceparent, mcp.MetaTracestate, mcp.MetaBaggage}

// The Redis tier stores an entry as a length-prefixed JSON header followed
// by the body, so a read parses the small header and never the body.
type redisHeader struct {
	Key   string     `json:"k"`
	Scope string     `json:"s"`
	FP    string     `json:"f,omitempty"`
	Gen   generation `json:"g"`
	// GraceMs is how much of the key's Redis TTL is stale-if-error time:
	// the fresh remainder is PTTL - GraceMs, by Redis's clock. FreshMs is
	// the fresh time it was written with, which dates it: its age is
	// FreshMs + GraceMs - PTTL.
	GraceMs int64 `json:"grace"`
	FreshMs int64 `json:"fresh"`
	// LagMs is how long before the write its fill began (rounded up): the
	// entry is as old as its fill, not as its write.
	LagMs int64 `json:"lag,omitempty"`
	// Sealed: the body is encrypted (seal.go).
	Sealed bool `json:"x,omitempty"`
}

func encodeRedis(e *entry, body []byte, sealed bool, fresh, grace, lag time.Duration) []byte {
	lagMs := (lag + time.Millisecond - 1).Milliseconds()
	hdr, _ := json.Marshal(redisHeader{Key: e.key, Scope: e.scope, FP: e.fp, Gen: e.gen, GraceMs: grace.Milliseconds(), FreshMs: fresh.Milliseconds(), LagMs: lagMs, Sealed: sealed})
	out := binary.AppendUvarint(nil, uint64(len(hdr)))
	out = append(out, hdr...)
	return append(out, body...)
}

var errBadRedisEntry = errors.New("malformed shared entry")

func decodeRedis(b []byte) (redisHeader, []byte, error) {
	var h redisHeader
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return h, nil, errBadRedisEntry
	}
	if err := json.Unmarshal(b[w:w+int(n)], &h); err != nil {
		return h, nil, errBadRedisEntry
	}
	return h, b[w+int(n):], nil
}
