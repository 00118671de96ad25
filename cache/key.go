package cache

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"hash/fnv"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// keyVersion starts every key; bump it when the key or value layout changes
// so replicas of two versions never read each other's entries.
const keyVersion = "m4"

// unkeyedMeta lists the `_meta` members that do not change an answer: they
// are forwarded but left out of the key, so callers that differ only in them
// share entries. W3C baggage is keyed: it carries application context (a
// tenant, a user) that an upstream may well answer by.
var unkeyedMeta = map[string]bool{
	mcp.MetaProgressToken: true,
	mcp.MetaTraceparent:   true,
	mcp.MetaTracestate:    true,
	mcp.MetaLogLevel:      true,
	mcp.MetaClientInfo:    true, // servers must not vary on it (the spec says so)
}

// digest hashes every part of a request that can change its answer: the
// upstream's protocol era, the method, the params, the keyed `_meta` members,
// and the headers forwarded to the upstream other than the credentials (which
// key private entries through the fingerprint instead).
//
// Objects are hashed member by member in sorted order, and nested objects and
// arrays in canonical form (numbers in them too: 1, 1.0 and 1e0 are one
// number), so equal JSON in any key order, spacing or spelling of a number
// hashes the same; every field is length-prefixed, so no two different
// requests can collide by concatenation. Top-level scalars are hashed as
// written: a string spelt with other escapes is another key, which costs a
// miss, never a wrong hit.
func digest(era uint64, method string, params, meta jsonrpc.Object, h http.Header, forwarded []string, credentials map[string]bool) (string, error) {
	d := digester{h: sha256.New()}
	d.field(strconv.AppendUint(d.scratch[:0], era, 10))
	d.field([]byte(method))
	if err := d.object(params, nil); err != nil {
		return "", err
	}
	if err := d.object(meta, unkeyedMeta); err != nil {
		return "", err
	}
	var names []string
	for _, name := range forwarded {
		if cn := http.CanonicalHeaderKey(name); !credentials[cn] {
			names = append(names, cn)
		}
	}
	sort.Strings(names)
	d.count(len(names))
	for _, name := range names {
		vals := h.Values(name)
		d.field([]byte(name))
		d.count(len(vals))
		for _, v := range vals {
			d.field([]byte(v))
		}
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(d.h.Sum(sum[:0])), nil
}

type digester struct {
	h       hash.Hash
	scratch [binary.MaxVarintLen64]byte
}

func (d *digester) count(n int) {
	d.h.Write(d.scratch[:binary.PutUvarint(d.scratch[:], uint64(n))])
}

func (d *digester) field(b []byte) {
	d.count(len(b))
	d.h.Write(b)
}

func (d *digester) object(o jsonrpc.Object, skip map[string]bool) error {
	keys := make([]string, 0, len(o))
	for k := range o {
		if !skip[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	d.count(len(keys))
	for _, k := range keys {
		d.field([]byte(k))
		v := bytes.TrimSpace(o[k])
		if len(v) > 2 && (v[0] == '{' || v[0] == '[') {
			c, err := canonical(v)
			if err != nil {
				return err
			}
			v = c
		}
		d.field(v)
	}
	return nil
}

// fingerprinter derives a caller's credential fingerprint: an HMAC of the
// credential headers, never the credentials themselves.
type fingerprinter struct {
	headers []string        // canonical names, in configuration order
	set     map[string]bool // the same, for lookups
	macs    sync.Pool       // of hash.Hash, HMAC keyed with the secret
	anon    string          // the fingerprint of a caller with none of the headers
}

func newFingerprinter(secret []byte, headers []string) *fingerprinter {
	f := &fingerprinter{set: map[string]bool{}}
	f.macs.New = func() any { return hmac.New(sha256.New, secret) }
	for _, h := range headers {
		cn := http.CanonicalHeaderKey(h)
		f.headers = append(f.headers, cn)
		f.set[cn] = true
	}
	f.anon = f.compute(http.Header{})
	return f
}

// of is the fingerprint of a caller: of its principal when it has one (with
// a "p" in front, so it can equal no credential's), else of its credential
// headers.
func (f *fingerprinter) of(h http.Header, principal string) string {
	if principal != "" {
		return "p" + f.mac(func(m hash.Hash) { m.Write([]byte(principal)) })
	}
	for _, name := range f.headers {
		if _, ok := h[name]; ok {
			return f.compute(h)
		}
	}
	return f.anon
}

func (f *fingerprinter) compute(h http.Header) string {
	return f.mac(func(m hash.Hash) {
		var n [binary.MaxVarintLen64]byte
		for _, name := range f.headers {
			vals := h.Values(name)
			m.Write(n[:binary.PutUvarint(n[:], uint64(len(vals)))])
			for _, v := range vals {
				m.Write(n[:binary.PutUvarint(n[:], uint64(len(v)))])
				m.Write([]byte(v))
			}
		}
	})
}

// mac returns, in hex, the first half of the HMAC of what write writes.
func (f *fingerprinter) mac(write func(hash.Hash)) string {
	m := f.macs.Get().(hash.Hash)
	defer f.macs.Put(m)
	m.Reset()
	write(m)
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:16])
}

// entryKey builds the key of one entry. Upstream names cannot contain ':'
// and the digest and fingerprint are hex, so the fields cannot run into each
// other. The braces are a Redis Cluster hash tag: every key of one upstream
// (its entries, generations and revalidate-before time) lives in one
// slot, so a lookup's keys are one pipelined round trip to one node, on a
// Cluster as on one server. (Its TIME has no key: on a Cluster, go-redis
// sends it to another node, in parallel.) Upstreams spread over the slots.
func entryKey(prefix, upstream, tagHash, scope, fp, method, dig string) string {
	return prefix + keyVersion + ":{" + upstream + "}:" + tagHash + ":" + scope + ":" + fp + ":" + method + ":" + dig
}

// genKey names the invalidation generation of a tag.
func genKey(prefix, upstream, tagHash string) string {
	return prefix + keyVersion + ":{" + upstream + "}:" + tagHash + ":gen"
}

// revalidateKey holds the time (ms, Redis's clock) before which the
// upstream's shared entries are stale.
func revalidateKey(prefix, upstream string) string {
	return prefix + keyVersion + ":{" + upstream + "}:rb"
}

// tagHash names a tag in keys. A collision only makes two tags share their
// invalidations (and a Redis shard), never serves a wrong entry, so a fast
// 64-bit hash will do.
func tagHash(tag string) string {
	h := fnv.New64a()
	h.Write([]byte(tag))
	return strconv.FormatUint(h.Sum64(), 16)
}

// canonical re-encodes JSON with object members sorted at every depth,
// strings in one spelling and numbers in one form each (canonicalNumber):
// two encodings of the same value are the same bytes, and two values are
// never. Text that decoding would not keep exactly, a surrogate escape
// (a lone \ud800 becomes U+FFFD, where JavaScript keeps it) or bytes that
// are not UTF-8, is hashed as written: a miss, never another's answer.
// (No re-encoding has either, so as written it meets none.)
func canonical(raw []byte) (json.RawMessage, error) {
	if !utf8.Valid(raw) || surrogateEscape(raw) {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(canonicalNumbers(v))
}

// surrogateEscape reports a \uD800-\uDFFF in raw (or what looks like
// one after an escaped backslash: a miss at worst).
func surrogateEscape(raw []byte) bool {
	for {
		i := bytes.Index(raw, []byte(`\u`))
		if i < 0 || i+3 >= len(raw) {
			return false
		}
		if c, d := raw[i+2]|0x20, raw[i+3]|0x20; c == 'd' && (d >= '8' && d <= '9' || d >= 'a' && d <= 'f') {
			return true
		}
		raw = raw[i+2:]
	}
}

func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return canonicalNumber(x)
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumbers(e)
		}
	}
	return v
}

// canonicalNumber writes a JSON number exactly, in one form: its
// significant digits and a power of ten (1.50 and 15e-1 are both 15e-1, 0
// and -0.0 are 0). No precision is lost, so different numbers never meet.
// A number whose exponent does not fit an int stays as written.
func canonicalNumber(n json.Number) json.Number {
	s := string(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 1<<40 || e < -(1<<40) {
			return n
		}
		mant, exp = s[:i], e
	}
	if whole, frac, ok := strings.Cut(mant, "."); ok {
		mant, exp = whole+frac, exp-len(frac)
	}
	mant = strings.TrimLeft(mant, "0")
	trimmed := strings.TrimRight(mant, "0")
	exp += len(mant) - len(trimmed)
	if trimmed == "" {
		return "0"
	}
	if neg {
		trimmed = "-" + trimmed
	}
	if exp == 0 {
		return json.Number(trimmed)
	}
	return json.Number(trimmed + "e" + strconv.Itoa(exp))
}
