package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// rounds lets the Redis lookups that arrive together share one round trip.
// A lookup queues the commands it needs; if no round trip is under way it
// runs one, a pipeline of everything queued by then, itself included;
// otherwise it waits for the next, which the lookup finishing the current
// one starts for whoever queued meanwhile. So under load a round trip
// carries as many lookups as arrived during the one before, and a lone
// lookup pays no more than its own pipeline.
type rounds struct {
	rdb     redis.UniversalClient
	timeout time.Duration
	// failed is told of each round trip that failed, once: however many
	// lookups it carried, and however many of them gave up waiting, it is
	// one failure of Redis.
	failed func()

	mu      sync.Mutex
	queue   []*ask
	running bool
}

// ask is one lookup's share of a round trip: add queues its commands, and
// done receives the round trip's error once their results are in.
type ask struct {
	add  func(*round)
	done chan error
}

// round is one round trip's pipeline, in which a read is sent once however
// many of its lookups ask for it: a hot entry that many callers read at
// once is one GET and one PTTL, and a tag's generation, the
// revalidate-before time and Redis's clock one command each. The replies,
// and what they decode to (decoded), are shared, read-only, by the lookups
// that asked.
type round struct {
	pipe  redis.Pipeliner
	gets  map[string]*redis.StringCmd
	pttls map[string]*redis.DurationCmd
	now   *redis.TimeCmd

	mu    sync.Mutex
	found map[string]*found
}

// Get is GET key, sent once per round.
func (r *round) Get(ctx context.Context, key string) *redis.StringCmd {
	return once(&r.gets, key, func() *redis.StringCmd { return r.pipe.Get(ctx, key) })
}

// PTTL is PTTL key, sent once per round.
func (r *round) PTTL(ctx context.Context, key string) *redis.DurationCmd {
	return once(&r.pttls, key, func() *redis.DurationCmd { return r.pipe.PTTL(ctx, key) })
}

// once is m's command for key, sent with send the first time it is asked.
func once[C redis.Cmder](m *map[string]C, key string, send func() C) C {
	c, ok := (*m)[key]
	if !ok {
		if *m == nil {
			*m = map[string]C{}
		}
		c = send()
		(*m)[key] = c
	}
	return c
}

// Time is Redis's clock, asked once per round.
func (r *round) Time(ctx context.Context) *redis.TimeCmd {
	if r.now == nil {
		r.now = r.pipe.Time(ctx)
	}
	return r.now
}

// decoded is key's reply as decode makes it, decoded once for all the
// lookups of the round that read it (its header parsed, a sealed body
// opened once); after the round trip only.
func (r *round) decoded(key string, decode func() *found) *found {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.found[key]
	if !ok {
		if r.found == nil {
			r.found = map[string]*found{}
		}
		f = decode()
		r.found[key] = f
	}
	return f
}

// maxAsks bounds the lookups one round trip carries; more wait for the
// next.
const maxAsks = 64

// do queues add's commands for the next round trip and waits for their
// results. ctx bounds the wait; the round trip itself is bounded by the
// tier's timeout alone, since it carries other callers' lookups too.
func (r *rounds) do(ctx context.Context, add func(*round)) error {
	a := &ask{add: add, done: make(chan error, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, a)
	lead := !r.running
	r.running = true
	r.mu.Unlock()
	if lead {
		r.run(context.WithoutCancel(ctx))
	}
	select {
	case err := <-a.done:
		if err != nil && !errors.Is(err, redis.Nil) {
			return sharedFailure{err}
		}
		return err
	case <-ctx.Done():
		return sharedFailure{ctx.Err()}
	}
}

// run carries the queue in round trips until one leaves it empty; after
// the first (under the leading caller's context, for its trace), the rest
// run on a goroutine of their own, so that the caller that led the first
// is not held up by lookups that came after its own.
func (r *rounds) run(ctx context.Context) {
	r.mu.Lock()
	n := min(len(r.queue), maxAsks)
	batch := r.queue[:n:n]
	r.queue = r.queue[n:]
	if len(r.queue) == 0 {
		r.queue = nil
	}
	r.mu.Unlock()
	r.trip(ctx, batch)
	r.mu.Lock()
	more := len(r.queue) > 0
	r.running = more
	r.mu.Unlock()
	if more {
		go r.run(context.Background())
	}
}

// trip runs one pipeline of batch's commands and tells each its outcome.
func (r *rounds) trip(ctx context.Context, batch []*ask) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	rd := &round{pipe: r.rdb.Pipeline()}
	for _, a := range batch {
		a.add(rd)
	}
	_, err := rd.pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) && r.failed != nil {
		r.failed()
	}
	for _, a := range batch {
		a.done <- err
	}
}

// sharedFailure is a lookup's round trip that failed, or that it stopped
// waiting for: the round trip itself counts the failure (rounds.failed).
type sharedFailure struct{ err error }

func (f sharedFailure) Error() string { return f.err.Error() }
func (f sharedFailure) Unwrap() error { return f.err }
