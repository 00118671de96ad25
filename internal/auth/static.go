package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// staticTokens are the configured tokens' SHA-256 digests.
type staticTokens [][sha256.Size]byte

// HashPrefix marks a token written as its digest.
const HashPrefix = "sha256:"

func newStaticTokens(tokens []string) (staticTokens, error) {
	st := make(staticTokens, 0, len(tokens))
	for i, t := range tokens {
		d, err := TokenDigest(t)
		if err != nil {
			return nil, fmt.Errorf("bearer_tokens[%d]: %w", i, err)
		}
		st = append(st, d)
	}
	return st, nil
}

// TokenDigest is the digest a configured token stands for: the hex after
// "sha256:", or the SHA-256 of a token written as itself.
func TokenDigest(t string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	hexDigest, hashed := strings.CutPrefix(t, HashPrefix)
	if !hashed {
		return sha256.Sum256([]byte(t)), nil
	}
	b, err := hex.DecodeString(hexDigest)
	if err != nil || len(b) != sha256.Size {
		return d, fmt.Errorf("%s must be followed by 64 hex digits", HashPrefix)
	}
	copy(d[:], b)
	return d, nil
}

// match compares tok's digest with every configured one, in constant time
// and without stopping at the first match: comparing digests keeps the
// token's length and content out of the timing.
func (st staticTokens) match(tok string) (*Principal, bool) {
	got := sha256.Sum256([]byte(tok))
	found := 0
	for _, want := range st {
		found |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	if found != 1 {
		return nil, false
	}
	return &Principal{ID: "token:" + hex.EncodeToString(got[:6])}, true
}
