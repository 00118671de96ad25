package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// memory is the in-process tier. It is an interface of our own so that the
// library behind it (ristretto today; Otter would fit too) is a one-file
// choice.
type memory interface {
	get(key string) (*entry, bool)
	// set stores e for ttl, best effort: a set may be dropped, and a read
	// straight after it may miss.
	set(key string, e *entry, ttl time.Duration)
	// flush makes every stored entry unreachable.
	flush()
	// epoch counts the flushes; an entry is stored with the epoch its fill
	// started under (entry.gen.Epoch) and is unreachable once it moved.
	epoch() uint64
	close()
}

// ristrettoMemory adapts ristretto v2, minding its traps
// (../shared/design/cache-notes.md): cost is counted in bytes with the
// library's internal cost off; a TTL of 0 would mean "forever", so an entry
// with no time left is not stored at all; keys are compared only by hash, so
// the caller checks the key inside the value; and flushing is an epoch bump
// checked on read rather than Clear, which must not race traffic.
type ristrettoMemory struct {
	c         *ristretto.Cache[string, *entry]
	flushes   atomic.Uint64
	evictions *atomic.Uint64
}

func newRistretto(maxBytes int64, evictions *atomic.Uint64) (*ristrettoMemory, error) {
	counters := min(max(maxBytes/100, 10_000), 10_000_000)
	m := &ristrettoMemory{evictions: evictions}
	c, err := ristretto.NewCache(&ristretto.Config[string, *entry]{
		NumCounters:        counters,
		MaxCost:            maxBytes,
		BufferItems:        256,
		IgnoreInternalCost: true,
		OnEvict:            func(*ristretto.Item[*entry]) { evictions.Add(1) },
	})
	if err != nil {
		return nil, err
	}
	m.c = c
	return m, nil
}

func (m *ristrettoMemory) get(key string) (*entry, bool) {
	e, ok := m.c.Get(key)
	if !ok || e.key != key || e.gen.Epoch != m.flushes.Load() {
		return nil, false
	}
	return e, true
}

func (m *ristrettoMemory) set(key string, e *entry, ttl time.Duration) {
	if ttl < time.Millisecond {
		return
	}
	if m.c.SetWithTTL(key, e, e.cost(), ttl) {
		// Sets are applied asynchronously. Waiting here, on the miss path
		// that already paid for an upstream call, makes the next read
		// likely to hit instead of paying again; correctness never
		// depends on it.
		m.c.Wait()
	}
}

func (m *ristrettoMemory) flush()        { m.flushes.Add(1) }
func (m *ristrettoMemory) epoch() uint64 { return m.flushes.Load() }
func (m *ristrettoMemory) close()        { m.c.Close() }

// generations tracks, per upstream and invalidation tag, how many times the
// tag was invalidated. An entry is valid only under the generation it was
// filled with, so an invalidation makes every entry of its tag unreachable at
// once, in every scope and for every credential, without finding them; and a
// fill that started before an invalidation lands unreachable.
type generations struct {
	mu   sync.RWMutex
	gens map[string]uint64
	// onReset makes every entry unreachable (a memory flush); it runs
	// before the table is emptied, under its lock, so no lookup ever sees
	// the reset generations with the entries of before.
	onReset func()
}

func (g *generations) size() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.gens)
}

// maxGenerations bounds the table; past it, it is reset together with a
// memory flush, which is always safe.
const maxGenerations = 100_000

func (g *generations) get(id string) uint64 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.gens[id]
}

// raise sets id's generation to at least to (to == 0: one more) and reports
// the generation now in force and whether the table had to be reset.
func (g *generations) raise(id string, to uint64) (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	reset := false
	if g.gens == nil || len(g.gens) >= maxGenerations {
		if g.gens != nil && g.onReset != nil {
			g.onReset()
		}
		g.gens, reset = map[string]uint64{}, g.gens != nil
	}
	cur := g.gens[id]
	if to == 0 {
		to = cur + 1
	}
	if to > cur {
		g.gens[id] = to
		cur = to
	}
	return cur, reset
}
