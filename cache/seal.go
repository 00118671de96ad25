package cache

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// sealer encrypts private entries' bodies in Redis (cache.redis.
// encrypt_private), so that a dump of Redis, a replica of it, or anyone
// with read access to it holds no private answer in clear.
//
// Each caller's entries are sealed with AES-256-GCM under a key of their
// own: HKDF-SHA256 of the cache secret with the caller's fingerprint as
// info. The entry's key is the additional data, so a sealed body moved to
// another key does not open. The header (identity, generation, times)
// stays in clear: it holds no answer, and lookups read it first.
type sealer struct {
	secret []byte
}

var errUnsealed = errors.New("sealed entry does not open")

func (s *sealer) aead(fp string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, s.secret, nil, "manifold private entry "+fp, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal returns nonce || ciphertext of body.
func (s *sealer) seal(fp, key string, body []byte) ([]byte, error) {
	a, err := s.aead(fp)
	if err != nil {
		return nil, err
	}
	out := make([]byte, a.NonceSize(), a.NonceSize()+len(body)+a.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, err
	}
	return a.Seal(out, out, body, []byte(key)), nil
}

// open reverses seal.
func (s *sealer) open(fp, key string, sealed []byte) ([]byte, error) {
	a, err := s.aead(fp)
	if err != nil {
		return nil, err
	}
	if len(sealed) < a.NonceSize() {
		return nil, errUnsealed
	}
	body, err := a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], []byte(key))
	if err != nil {
		return nil, errUnsealed
	}
	return body, nil
}
