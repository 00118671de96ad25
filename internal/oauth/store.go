package oauth

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/breaker"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// Store keeps values for a while, for every replica that shares it. Values
// reach it sealed (see newSealer): a store never holds a token in clear.
//
// Each value has a version, and the store itself compares versions, in one
// step with the write or the delete: replicas racing to store a grant, or
// to drop one the authorization server refused, never undo a newer one.
// A value seen at version v is replaced only by a version above v, and
// dropped only while it is still at v.
type Store interface {
	Get(ctx context.Context, key string) (Versioned, error)
	// Put stores v under key unless the store holds a version of key at
	// least as new; stored reports whether it did.
	Put(ctx context.Context, key string, v Versioned, ttl time.Duration) (stored bool, err error)
	// Take returns the value and deletes it, at once: what is taken once
	// (an authorization's state) is never taken twice, on any replica.
	Take(ctx context.Context, key string) ([]byte, error)
	// Drop deletes key if, and only if, the store holds it at version.
	Drop(ctx context.Context, key string, version int64) error
}

// Versioned is a stored value and its version (above 0; a value stored
// before versions were kept reads as version 0).
type Versioned struct {
	Value   []byte
	Version int64
}

// ErrNotFound is a key the store does not hold (or no longer does).
var ErrNotFound = errors.New("not found")

// ErrStoreUnavailable is a store skipped while its breaker is open.
var ErrStoreUnavailable = errors.New("oauth store unavailable")

// MemoryStore is a Store in this process, bounded in entries.
type MemoryStore struct {
	mu      sync.Mutex
	entries map[string]memoryEntry
}

type memoryEntry struct {
	Versioned
	expires time.Time
}

// maxMemoryEntries bounds a MemoryStore: past it, expired entries go, then
// a new key is refused.
const maxMemoryEntries = 100_000

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{entries: map[string]memoryEntry{}} }

// live is key's entry unless it has expired; m.mu is held.
func (m *MemoryStore) live(key string) (memoryEntry, bool) {
	e, ok := m.entries[key]
	return e, ok && time.Now().Before(e.expires)
}

func (m *MemoryStore) Get(_ context.Context, key string) (Versioned, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.live(key)
	if !ok {
		return Versioned{}, ErrNotFound
	}
	return e.Versioned, nil
}

func (m *MemoryStore) Put(_ context.Context, key string, v Versioned, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.live(key); ok && e.Version >= v.Version {
		return false, nil
	}
	if _, ok := m.entries[key]; !ok && len(m.entries) >= maxMemoryEntries {
		now := time.Now()
		for k, e := range m.entries {
			if now.After(e.expires) {
				delete(m.entries, k)
			}
		}
		if len(m.entries) >= maxMemoryEntries {
			return false, errors.New("oauth store full")
		}
	}
	m.entries[key] = memoryEntry{Versioned: v, expires: time.Now().Add(ttl)}
	return true, nil
}

func (m *MemoryStore) Take(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.live(key)
	delete(m.entries, key)
	if !ok {
		return nil, ErrNotFound
	}
	return e.Value, nil
}

func (m *MemoryStore) Drop(_ context.Context, key string, version int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[key]; ok && e.Version == version {
		delete(m.entries, key)
	}
	return nil
}

// RedisStore is a Store in Redis, shared by every replica: each value a
// hash of its version (v, as 20 digits, which compare as strings compare)
// and its data (d), compared and written by one script. A plain string
// under a key is a value stored before versions: version 0.
type RedisStore struct {
	Client redis.UniversalClient
	Prefix string
}

var (
	redisGet = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'hash' then return redis.call('HMGET', KEYS[1], 'v', 'd') end
if t == 'string' then return {'0', redis.call('GET', KEYS[1])} end
return false`)
	redisPut = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'hash' then
  local cur = redis.call('HGET', KEYS[1], 'v')
  if cur and cur >= ARGV[1] then return 0 end
elseif t ~= 'none' then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)
	redisTake = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1]).ok
local v
if t == 'hash' then v = redis.call('HGET', KEYS[1], 'd')
elseif t == 'string' then v = redis.call('GET', KEYS[1])
else return false end
redis.call('DEL', KEYS[1])
return v`)
	redisDrop = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1]).ok
if (t == 'hash' and redis.call('HGET', KEYS[1], 'v') == ARGV[1]) or (t == 'string' and ARGV[1] == ARGV[2]) then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// versionString is v as RedisStore keeps it: fixed width, so that the
// script compares versions as strings.
func versionString(v int64) string { return fmt.Sprintf("%020d", max(v, 0)) }

func (r RedisStore) Get(ctx context.Context, key string) (Versioned, error) {
	res, err := redisGet.Run(ctx, r.Client, []string{r.Prefix + key}).StringSlice()
	if errors.Is(err, redis.Nil) {
		return Versioned{}, ErrNotFound
	}
	if err != nil {
		return Versioned{}, err
	}
	if len(res) != 2 {
		return Versioned{}, ErrNotFound
	}
	v, err := strconv.ParseInt(res[0], 10, 64)
	if err != nil {
		return Versioned{}, fmt.Errorf("oauth store: version %q of %s: %w", res[0], key, err)
	}
	return Versioned{Value: []byte(res[1]), Version: v}, nil
}

func (r RedisStore) Put(ctx context.Context, key string, v Versioned, ttl time.Duration) (bool, error) {
	n, err := redisPut.Run(ctx, r.Client, []string{r.Prefix + key}, versionString(v.Version), v.Value, max(ttl.Milliseconds(), 1)).Int()
	return n == 1, err
}

func (r RedisStore) Take(ctx context.Context, key string) ([]byte, error) {
	v, err := redisTake.Run(ctx, r.Client, []string{r.Prefix + key}).Text()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return []byte(v), err
}

func (r RedisStore) Drop(ctx context.Context, key string, version int64) error {
	return redisDrop.Run(ctx, r.Client, []string{r.Prefix + key}, versionString(version), versionString(0)).Err()
}

// NewRedisStore is a Store in Redis for every replica, guarded: each
// command bounded by timeout (go-redis told to honour it, and to retry
// once), and skipped while brk is open. Closing client ends it.
func NewRedisStore(opts redis.UniversalOptions, prefix string, timeout time.Duration, brk *breaker.Breaker) (s Guarded, client redis.UniversalClient) {
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = timeout, timeout, timeout, timeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = 1
	client = redis.NewUniversalClient(&opts)
	return Guarded{Store: RedisStore{Client: client, Prefix: prefix}, Breaker: brk, Timeout: timeout}, client
}

// Guarded is a Store that may hang or fail (Redis), asked under a bounded
// wait and a circuit breaker: while it fails, each request skips it at once
// (ErrStoreUnavailable) and the client goes on with what it holds in
// memory, instead of waiting on it every time.
type Guarded struct {
	Store   Store
	Breaker *breaker.Breaker
	Timeout time.Duration
}

func (g Guarded) Get(ctx context.Context, key string) (v Versioned, err error) {
	err = g.call(ctx, func(ctx context.Context) error {
		v, err = g.Store.Get(ctx, key)
		return err
	})
	return v, err
}

func (g Guarded) Put(ctx context.Context, key string, v Versioned, ttl time.Duration) (stored bool, err error) {
	err = g.call(ctx, func(ctx context.Context) error {
		stored, err = g.Store.Put(ctx, key, v, ttl)
		return err
	})
	return stored, err
}

func (g Guarded) Take(ctx context.Context, key string) (v []byte, err error) {
	err = g.call(ctx, func(ctx context.Context) error {
		v, err = g.Store.Take(ctx, key)
		return err
	})
	return v, err
}

func (g Guarded) Drop(ctx context.Context, key string, version int64) error {
	return g.call(ctx, func(ctx context.Context) error { return g.Store.Drop(ctx, key, version) })
}

// call runs f under the timeout and the breaker; ErrNotFound is an
// answer, not a failure.
func (g Guarded) call(ctx context.Context, f func(context.Context) error) error {
	if !g.Breaker.Allow() {
		return ErrStoreUnavailable
	}
	cctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	err := f(cctx)
	switch {
	case err == nil || errors.Is(err, ErrNotFound):
		g.Breaker.Success()
	case ctx.Err() != nil:
		g.Breaker.Abandon() // the caller left: that says nothing of the store
	default:
		g.Breaker.Failure()
	}
	return err
}

// newSealer seals what the client stores, for the principal it belongs to
// under its store key (see internal/seal).
func newSealer(secret []byte) *seal.Sealer { return seal.New(secret, "manifold-oauth-v1\x00") }
