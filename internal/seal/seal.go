// Package seal encrypts what Manifold keeps outside its process (private
// cache entries in Redis, OAuth tokens in their store) so that a dump of
// the store, a replica of it, or anyone who can read it holds nothing in
// clear, and a value opens only where it was sealed.
//
// Each owner's values are sealed with AES-256-GCM under a key of their own:
// HKDF-SHA256 of the secret, with the sealer's purpose and the owner (a
// principal, a credential's fingerprint) as info. The value's store key is
// the additional data, so a sealed value copied under another key, or
// offered for another owner or purpose, does not open.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// ErrNotOpen is what Open returns for a value that was not sealed by this
// secret, purpose, owner and key, or that was altered.
var ErrNotOpen = errors.New("sealed value does not open")

// Sealer seals and opens values for one purpose.
type Sealer struct {
	secret  []byte
	purpose string
}

// New returns a sealer under secret; purpose keeps the keys of one use
// apart from another's (and fixes them: changing it makes every value
// sealed before unreadable).
func New(secret []byte, purpose string) *Sealer {
	return &Sealer{secret: secret, purpose: purpose}
}

func (s *Sealer) aead(owner string) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, s.secret, nil, s.purpose+owner, 32)
	if err != nil {
		return nil, fmt.Errorf("derive key: %w", err)
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Seal returns nonce || ciphertext of v, for owner, stored under key.
func (s *Sealer) Seal(owner, key string, v []byte) ([]byte, error) {
	a, err := s.aead(owner)
	if err != nil {
		return nil, err
	}
	out := make([]byte, a.NonceSize(), a.NonceSize()+len(v)+a.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return a.Seal(out, out, v, []byte(key)), nil
}

// Open reverses Seal for the same owner and key.
func (s *Sealer) Open(owner, key string, sealed []byte) ([]byte, error) {
	a, err := s.aead(owner)
	if err != nil {
		return nil, err
	}
	if len(sealed) < a.NonceSize() {
		return nil, ErrNotOpen
	}
	v, err := a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], []byte(key))
	if err != nil {
		return nil, ErrNotOpen
	}
	return v, nil
}
