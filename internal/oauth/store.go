package oauth

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/seal"
)

// Store keeps values for a while, for every replica that shares it. Values
// reach it sealed (see newSealer): a store never holds a token in clear.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, v []byte, ttl time.Duration) error
	// Take returns the value and deletes it, at once: what is taken once
	// (an authorization's state) is never taken twice, on any replica.
	Take(ctx context.Context, key string) ([]byte, error)
	Delete(ctx context.Context, key string) error
}

// ErrNotFound is a key the store does not hold (or no longer does).
var ErrNotFound = errors.New("not found")

// MemoryStore is a Store in this process, bounded in entries.
type MemoryStore struct {
	mu      sync.Mutex
	entries map[string]memoryEntry
}

type memoryEntry struct {
	v       []byte
	expires time.Time
}

// maxMemoryEntries bounds a MemoryStore: past it, expired entries go, then
// a new key is refused.
const maxMemoryEntries = 100_000

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{entries: map[string]memoryEntry{}} }

func (m *MemoryStore) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok || time.Now().After(e.expires) {
		return nil, ErrNotFound
	}
	return e.v, nil
}

func (m *MemoryStore) Set(_ context.Context, key string, v []byte, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[key]; !ok && len(m.entries) >= maxMemoryEntries {
		now := time.Now()
		for k, e := range m.entries {
			if now.After(e.expires) {
				delete(m.entries, k)
			}
		}
		if len(m.entries) >= maxMemoryEntries {
			return errors.New("oauth store full")
		}
	}
	m.entries[key] = memoryEntry{v: v, expires: time.Now().Add(ttl)}
	return nil
}

func (m *MemoryStore) Take(ctx context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	delete(m.entries, key)
	if !ok || time.Now().After(e.expires) {
		return nil, ErrNotFound
	}
	return e.v, nil
}

func (m *MemoryStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, key)
	return nil
}

// RedisStore is a Store in Redis, shared by every replica.
type RedisStore struct {
	Client redis.UniversalClient
	Prefix string
}

func (r RedisStore) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := r.Client.Get(ctx, r.Prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return v, err
}

func (r RedisStore) Set(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	return r.Client.Set(ctx, r.Prefix+key, v, ttl).Err()
}

func (r RedisStore) Take(ctx context.Context, key string) ([]byte, error) {
	v, err := r.Client.GetDel(ctx, r.Prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return v, err
}

func (r RedisStore) Delete(ctx context.Context, key string) error {
	return r.Client.Del(ctx, r.Prefix+key).Err()
}

// newSealer seals what the client stores, for the principal it belongs to
// under its store key (see internal/seal).
func newSealer(secret []byte) *seal.Sealer { return seal.New(secret, "manifold-oauth-v1\x00") }
