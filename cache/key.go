package cache

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

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
func digest(era uint64, method string, params, meta jsonrpc.Object, h http.Header, forwarded []string, credentials map[string]bool) (sum [sha256.Size]byte, err error) {
	d := digesters.Get().(*digester)
	defer d.done()
	var num [20]byte
	d.field(strconv.AppendUint(num[:0], era, 10))
	d.str(method)
	if err := d.object(params, nil); err != nil {
		return sum, err
	}
	if err := d.object(meta, unkeyedMeta); err != nil {
		return sum, err
	}
	var arr [4]string
	names := arr[:0]
	for _, name := range forwarded {
		if cn := http.CanonicalHeaderKey(name); !credentials[cn] {
			names = append(names, cn)
		}
	}
	slices.Sort(names)
	d.count(len(names))
	for _, name := range names {
		vals := h.Values(name)
		d.str(name)
		d.count(len(vals))
		for _, v := range vals {
			d.str(v)
		}
	}
	return sha256.Sum256(d.b), nil
}

// A digester writes what digest hashes into one buffer, hashed once at
// the end: no hash state, no conversion of a string to bytes per field.
type digester struct{ b []byte }

var digesters = sync.Pool{New: func() any { return &digester{b: make([]byte, 0, 1024)} }}

func (d *digester) done() {
	if cap(d.b) <= 64<<10 { // a huge request's buffer is not kept
		d.b = d.b[:0]
		digesters.Put(d)
	}
}

func (d *digester) count(n int) { d.b = binary.AppendUvarint(d.b, uint64(n)) }

func (d *digester) str(s string) {
	d.count(len(s))
	d.b = append(d.b, s...)
}

func (d *digester) field(b []byte) {
	d.count(len(b))
	d.b = append(d.b, b...)
}

func (d *digester) object(o jsonrpc.Object, skip map[string]bool) error {
	var arr [8]string
	keys := arr[:0]
	for k := range o {
		if !skip[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	d.count(len(keys))
	for _, k := range keys {
		d.str(k)
		v := bytes.TrimSpace(o[k])
		if len(v) > 2 && (v[0] == '{' || v[0] == '[') && !isCanonical(v) {
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

// lookupKeys are what a lookup is keyed by, laid out in one string (one
// allocation where there were five): the generation id of the tag
// (upstream NUL tag hash), then the private and the public entry key,
// each {prefix}m4:{upstream}:{tag hash}:{scope}:{fingerprint}:{method}:{digest}.
// Upstream names cannot contain ':' and the digest and fingerprint are
// hex, so the fields cannot run into each other. The braces are a Redis
// Cluster hash tag: every key of one upstream (its entries, generations
// and revalidate-before time) lives in one slot, so a lookup's keys are
// one pipelined round trip to one node, on a Cluster as on one server.
// (Its TIME has no key: on a Cluster, go-redis sends it to another node,
// in parallel.) Upstreams spread over the slots.
type lookupKeys struct {
	gid  string    // the generation id of the request's tag
	th   string    // the tag's hash
	dig  string    // the digest of everything but the credential that keys the answer
	keys [2]string // the private candidate, then the public one
}

func newLookupKeys(prefix, upstream, tag, fp, method string, sum [sha256.Size]byte) lookupKeys {
	var dig [2 * sha256.Size]byte
	hex.Encode(dig[:], sum[:])
	var thb [16]byte
	th := strconv.AppendUint(thb[:0], tagSum(tag), 16)
	entry := len(prefix) + len(keyVersion) + len(upstream) + len(th) + len(method) + len(dig) + 16
	var b strings.Builder
	b.Grow(len(upstream) + 1 + len(th) + 2*entry + len(fp))
	b.WriteString(upstream)
	b.WriteByte(0)
	b.Write(th)
	ends := [3]int{b.Len()}
	for i, scope := range scopes {
		b.WriteString(prefix)
		b.WriteString(keyVersion + ":{")
		b.WriteString(upstream)
		b.WriteString("}:")
		b.Write(th)
		b.WriteByte(':')
		b.WriteString(scope)
		b.WriteByte(':')
		if i == 0 {
			b.WriteString(fp)
		}
		b.WriteByte(':')
		b.WriteString(method)
		b.WriteByte(':')
		b.Write(dig[:])
		ends[i+1] = b.Len()
	}
	s := b.String()
	return lookupKeys{gid: s[:ends[0]], th: s[len(upstream)+1 : ends[0]], dig: s[ends[2]-len(dig) : ends[2]],
		keys: [2]string{s[ends[0]:ends[1]], s[ends[1]:ends[2]]}}
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
func tagHash(tag string) string { return strconv.FormatUint(tagSum(tag), 16) }

// tagSum is FNV-1a of tag, without a hash state to allocate.
func tagSum(tag string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(tag); i++ {
		h = (h ^ uint64(tag[i])) * prime
	}
	return h
}
