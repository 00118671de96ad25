package cache

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"testing"
)

// FuzzCanonical holds the shortcut to what it stands for: a value hashed
// as written (isCanonical) is exactly what canonical would have hashed,
// so the shortcut never changes a key.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":1,"b":[true,false,null,0,-12,"x"]}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`,
		`{"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true},"sampling":{}}`,
		`{"a":10}`, `{"a":1.5}`, `{"a":-0}`, `{"a":"\u00e9"}`, `{"a":"<"}`, `{"a": 1}`, `[01]`, `{"a":1e5}`,
		`[[[[]]]]`, `{"":{"":[]}}`, `{"a":"é"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !isCanonical(raw) {
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("%s taken as canonical but is not JSON", raw)
		}
		c, err := canonical(raw)
		if err != nil {
			t.Fatalf("%s taken as canonical: %v", raw, err)
		}
		if !bytes.Equal(c, raw) {
			t.Fatalf("%s taken as canonical, canonical makes %s", raw, c)
		}
	})
}

func TestCanonicalShortcut(t *testing.T) {
	for s, want := range map[string]bool{
		`{"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true},"sampling":{}}`: true,
		`{"a":[1,-2,0,"x",null]}`: true,
		`{"b":1,"a":2}`:           false, // out of order
		`{"a":1,"a":2}`:           false, // a duplicate, which decoding collapses
		`{"a":10}`:                false, // canonicalNumber writes 1e1
		`{"a":"\u00e9"}`:          false, // an escape
		`{"a": 1}`:                false, // not compact
	} {
		if got := isCanonical([]byte(s)); got != want {
			t.Errorf("isCanonical(%s) = %v, want %v", s, got, want)
		}
	}
}

// entryKey is an entry's key as the version before newLookupKeys wrote it
// field by field: the reference the one-string layout is held to.
func entryKey(prefix, upstream, tagHash, scope, fp, method, dig string) string {
	return prefix + keyVersion + ":{" + upstream + "}:" + tagHash + ":" + scope + ":" + fp + ":" + method + ":" + dig
}

// The keys laid out in one string are the keys entryKey and tagHash
// write, which every replica of this version reads: a layout that
// differed would be a miss on every replica running the other.
func TestLookupKeysAsWritten(t *testing.T) {
	var sum [32]byte
	for i := range sum {
		sum[i] = byte(i * 7)
	}
	dig := hex.EncodeToString(sum[:])
	for _, c := range []struct{ prefix, upstream, tag, fp, method string }{
		{"", "up", "uri:test://doc", "", "resources/read"},
		{"tenant:", "files", "tools", "p0123456789abcdef", "tools/list"},
	} {
		k := newLookupKeys(c.prefix, c.upstream, c.tag, c.fp, c.method, sum)
		th := tagHash(c.tag)
		want := lookupKeys{gid: c.upstream + "\x00" + th, th: th, dig: dig, keys: [2]string{
			entryKey(c.prefix, c.upstream, th, "private", c.fp, c.method, dig),
			entryKey(c.prefix, c.upstream, th, "public", "", c.method, dig),
		}}
		if k != want {
			t.Errorf("newLookupKeys = %+v, want %+v", k, want)
		}
	}
	// The tag's hash is FNV-1a's, as before it was written out by hand.
	for _, tag := range []string{"", "tools", "uri:test://doc", "uri:é"} {
		h := fnv.New64a()
		h.Write([]byte(tag))
		if got := tagSum(tag); got != h.Sum64() {
			t.Errorf("tagSum(%q) = %x, FNV-1a %x", tag, got, h.Sum64())
		}
	}
}
