package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// One fill across replicas, in the manner of memcache leases. The single
// flight collapses the misses of one key within a replica; across replicas
// sharing Redis, the replica whose miss comes first takes a short lease on
// the key in Redis and fills, and the others poll Redis for what it stores
// instead of calling the upstream too. When the filler's answer cannot be
// shared (not cacheable, private, an error), it marks the lease open and the
// waiters fill for themselves at once; a private answer never reaches
// another credential, since a waiter only ever reads the keys of its own
// lookup. When the filler dies, its lease expires and a waiter takes it.
const (
	// fillLease is how long a lease holds: a waiter waits at most about
	// this long for another replica's fill before making its own.
	fillLease = 3 * time.Second
	// leasePoll is how often a waiter looks for the filled entry.
	leasePoll = 20 * time.Millisecond
	// openFor is how long an open lease tells arrivals not to wait.
	openFor   = time.Second
	leaseOpen = "open"
)

// lease is a fill lease this replica holds; the zero lease is none.
type lease struct {
	key, token string
}

// leaseState is what an attempt to take a lease found.
type leaseState int

const (
	leaseTaken leaseState = iota // ours now: fill
	leaseHeld                    // another replica is filling: wait
	leaseFree                    // open, or Redis did not answer: fill without waiting
)

// leaseKey names the lease of a lookup's public key under the Redis
// generation it began with: a fill that began before an invalidation does
// not hold back one that began after it.
func leaseKey(gen generation, publicKey string) string {
	return publicKey + ":lease:" + strconv.FormatUint(gen.Tag, 10) + "." + strconv.FormatUint(gen.Epoch, 10)
}

// takeLease tries to take the lease on key in one round trip.
func (s *redisTier) takeLease(ctx context.Context, key string) (lease, leaseState) {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	var got string
	ok := s.call(ctx, func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		pipe.SetNX(ctx, key, token, fillLease)
		get := pipe.Get(ctx, key)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		got = get.Val()
		return nil
	})
	switch {
	case !ok || got == "" || got == leaseOpen:
		return lease{}, leaseFree
	case got == token:
		return lease{key: key, token: token}, leaseTaken
	default:
		return lease{}, leaseHeld
	}
}

// releaseScript ends a lease if it is still the caller's: deleted when
// the entry was stored (waiters find it), or marked open for a while when
// it was not (waiters fill for themselves instead of taking turns).
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then return redis.call('DEL', KEYS[1]) end
redis.call('SET', KEYS[1], 'open', 'PX', ARGV[3])
return 1`)

// release ends l; stored says whether the filled entry is in Redis now.
func (s *redisTier) release(ctx context.Context, l lease, stored bool) {
	if l.key == "" {
		return
	}
	flag := "0"
	if stored {
		flag = "1"
	}
	s.call(ctx, func(ctx context.Context) error {
		return releaseScript.Run(ctx, s.rdb, []string{l.key}, l.token, flag, openFor.Milliseconds()).Err()
	})
}

// releaseLater releases l in the background (the caller has its answer).
func (s *redisTier) releaseLater(l lease, stored bool) {
	if l.key == "" {
		return
	}
	s.pending.Add(1)
	go func() {
		defer s.pending.Done()
		s.release(context.Background(), l, stored)
	}()
}

// fillShared fills l's miss once across the replicas sharing Redis: it
// takes the lease and fills, or waits for the holder's entry, or fills by
// itself when the lease is open, expired, or held for too long. An entry
// found in Redis meanwhile answers only if accept (when set) takes it: a
// refresh wants a new entry, not the one it is replacing.
func (c *Cache) fillShared(ctx context.Context, fill Fill, l *lookup, accept func(*entry) bool) outcome {
	if c.redis == nil || !l.redisOK {
		return c.fill(ctx, fill, l, lease{})
	}
	key := leaseKey(l.redisGen, l.keys[1])
	giveUp := time.Now().Add(fillLease + time.Second)
	for {
		ls, st := c.redis.takeLease(ctx, key)
		if st == leaseTaken {
			// Look again, as inside a single flight: the holder before us
			// may have stored the entry and let go just now.
			if res, ok := c.fromRedisIf(ctx, l, c.now(), accept); ok {
				c.redis.releaseLater(ls, true)
				l.st.sharedFills.Add(1)
				return outcome{result: res, reusable: res, fp: l.fp}
			}
			return c.fill(ctx, fill, l, ls)
		}
		if st == leaseFree || time.Now().After(giveUp) {
			return c.fill(ctx, fill, l, lease{})
		}
		select {
		case <-ctx.Done():
			return outcome{err: ctx.Err(), fp: l.fp}
		case <-time.After(leasePoll):
		}
		if res, ok := c.fromRedisIf(ctx, l, c.now(), accept); ok {
			// Its scope is not known here: joiners of another credential
			// look for themselves (see fillOnce).
			l.st.sharedFills.Add(1)
			return outcome{result: res, reusable: res, fp: l.fp}
		}
	}
}
