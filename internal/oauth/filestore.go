package oauth

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FileStore is a Store for a single Manifold without Redis: grants and
// registrations are kept in one file of its state directory, so that a
// restart asks no one again and registers nothing new. What else the
// client stores (pending authorizations, short-lived and single use)
// stays in memory and never reaches the disk. The file holds each value
// as the client sealed it (no token in clear), is its user's alone
// (0600), is bounded, and is replaced whole (a temporary file renamed
// over it) under a lock file, so that two processes sharing the
// directory never lose each other's writes or read half of one.
type FileStore struct {
	path string
	mem  *MemoryStore
	mu   sync.Mutex // this process's writers; the lock file serializes processes
}

// fileEntry is one value in the file: its version, the sealed value, and
// when it expires (Unix milliseconds).
type fileEntry struct {
	V int64  `json:"v"`
	D []byte `json:"d"`
	E int64  `json:"e"`
}

// maxStateBytes bounds the state file.
const maxStateBytes = 4 << 20

// NewFileStore keeps its file in dir, made (0700) if need be.
func NewFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("oauth state directory: %w", err)
	}
	return &FileStore{path: filepath.Join(dir, "oauth-state.json"), mem: NewMemoryStore()}, nil
}

// kept reports whether key is one the file keeps: a grant or a registration.
func kept(key string) bool { return strings.HasPrefix(key, "tok:") || strings.HasPrefix(key, "reg:") }

func (f *FileStore) Get(ctx context.Context, key string) (Versioned, error) {
	if !kept(key) {
		return f.mem.Get(ctx, key)
	}
	m, err := f.read()
	if err != nil {
		return Versioned{}, err
	}
	e, ok := m[key]
	if !ok || e.E < time.Now().UnixMilli() {
		return Versioned{}, ErrNotFound
	}
	return Versioned{Value: e.D, Version: e.V}, nil
}

func (f *FileStore) Put(ctx context.Context, key string, v Versioned, ttl time.Duration) (stored bool, err error) {
	if !kept(key) {
		return f.mem.Put(ctx, key, v, ttl)
	}
	err = f.update(func(m map[string]fileEntry) bool {
		if e, ok := m[key]; ok && e.V >= v.Version {
			return false
		}
		m[key] = fileEntry{V: v.Version, D: v.Value, E: time.Now().Add(ttl).UnixMilli()}
		stored = true
		return true
	})
	return stored && err == nil, err
}

func (f *FileStore) Take(ctx context.Context, key string) (v []byte, err error) {
	if !kept(key) {
		return f.mem.Take(ctx, key)
	}
	err = f.update(func(m map[string]fileEntry) bool {
		e, ok := m[key]
		delete(m, key)
		if ok {
			v = e.D
		}
		return ok
	})
	if err == nil && v == nil {
		err = ErrNotFound
	}
	return v, err
}

func (f *FileStore) Drop(ctx context.Context, key string, version int64) error {
	if !kept(key) {
		return f.mem.Drop(ctx, key, version)
	}
	return f.update(func(m map[string]fileEntry) bool {
		if e, ok := m[key]; ok && e.V == version {
			delete(m, key)
			return true
		}
		return false
	})
}

// read returns the file's entries (none when there is no file yet).
func (f *FileStore) read() (map[string]fileEntry, error) {
	file, err := os.Open(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]fileEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("oauth state file: %w", err)
	}
	defer file.Close()
	// The size is looked at first so that an oversized file is refused
	// unread; the limited read still bounds a file that grows meanwhile.
	if info, err := file.Stat(); err == nil && info.Size() > maxStateBytes {
		return nil, fmt.Errorf("oauth state file %s is over %d bytes", f.path, maxStateBytes)
	}
	b, err := io.ReadAll(io.LimitReader(file, maxStateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("oauth state file: %w", err)
	}
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("oauth state file %s is over %d bytes", f.path, maxStateBytes)
	}
	m := map[string]fileEntry{}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("oauth state file %s: %w", f.path, err)
		}
	}
	return m, nil
}

// update applies change to the entries under the lock, and writes them
// back if it reports a change (expired entries dropped).
func (f *FileStore) update(change func(map[string]fileEntry) bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	lock, err := os.OpenFile(f.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("oauth state lock: %w", err)
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("oauth state lock: %w", err)
	}
	m, err := f.read()
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	for k, e := range m {
		if e.E < now {
			delete(m, k)
		}
	}
	if !change(m) {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxStateBytes {
		return fmt.Errorf("oauth state file full (%d bytes at most)", maxStateBytes)
	}
	return writeAtomically(f.path, b)
}

// writeAtomically replaces path with b: a reader sees the old file or the
// new one, never part of either.
func writeAtomically(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".oauth-state-*")
	if err != nil {
		return fmt.Errorf("oauth state file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	if err := tmp.Chmod(0o600); err == nil {
		_, err = tmp.Write(b)
		if err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("oauth state file: %w", err)
	}
	return nil
}

// StateSecret is the secret that seals a FileStore's values, kept in dir
// (0600, made once, 32 random bytes): a restart opens what the process
// before it sealed.
func StateSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, "oauth-secret")
	if b, err := os.ReadFile(path); err == nil && len(b) == 32 {
		return b, nil
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	file, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) { // another process made it first
		if b, err := os.ReadFile(path); err == nil && len(b) == 32 {
			return b, nil
		}
		return nil, fmt.Errorf("oauth secret %s: not 32 bytes", path)
	}
	if err != nil {
		return nil, fmt.Errorf("oauth secret: %w", err)
	}
	_, err = file.Write(b)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("oauth secret: %w", err)
	}
	return b, nil
}
