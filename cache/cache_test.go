package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/redistest"
)

func testOptions(redisURL string) Options {
	o := Options{
		MemoryBytes: 8 << 20, Secret: []byte("test-secret-0123456789"), CredentialHeaders: []string{"Authorization"},
		MaxEntryBytes: 1 << 20, MaxTTL: time.Hour, StaleIfError: 2 * time.Second,
	}
	if redisURL != "" {
		ro, err := redis.ParseURL(redisURL)
		if err != nil {
			panic(err)
		}
		o.Redis = &RedisOptions{
			Client: redis.UniversalOptions{Addrs: []string{ro.Addr}},
			Prefix: "t:", Timeout: 500 * time.Millisecond, BreakerFailures: 2, BreakerCooldown: 200 * time.Millisecond,
		}
	}
	return o
}

func newCache(t *testing.T, o Options, logs io.Writer) *Cache {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clock is a settable time for the memory tier's freshness.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *Cache) stat(upstream string) *counters { return c.counters(upstream) }

func read(uri, token string) Request {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return Request{Upstream: "up", Tag: uri, Req: &mcp.Request{
		Method: mcp.MethodResourcesRead,
		Params: jsonrpc.Object{"uri": json.RawMessage(fmt.Sprintf("%q", uri))},
		Meta:   jsonrpc.Object{mcp.MetaProtocolVersion: json.RawMessage(`"2026-07-28"`)},
		Header: h,
	}}
}

// upstream is a fill that counts its calls and answers with the given
// hints and a body naming what it was asked and by whom.
type upstream struct {
	calls atomic.Int64
	ttlMs int
	scope string
	gate  chan struct{} // if set, each fill waits for it
}

func (u *upstream) fill(r Request) Fill {
	return func(ctx context.Context) (json.RawMessage, error) {
		n := u.calls.Add(1)
		if u.gate != nil {
			select {
			case <-u.gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return json.RawMessage(fmt.Sprintf(`{"resultType":"complete","ttlMs":%d,"cacheScope":%q,"contents":[{"uri":%s,"text":"for %s, call %d"}]}`,
			u.ttlMs, u.scope, r.Req.Params["uri"], r.Req.Header.Get("Authorization"), n)), nil
	}
}

func get(t *testing.T, c *Cache, r Request, f Fill) (text string, ttl int64, scope string) {
	t.Helper()
	res, err := c.Get(context.Background(), r, f)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	var v struct {
		TTL      int64  `json:"ttlMs"`
		Scope    string `json:"cacheScope"`
		Contents []struct {
			Text string `json:"text"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(res, &v); err != nil {
		t.Fatalf("result %s: %v", res, err)
	}
	return v.Contents[0].Text, v.TTL, v.Scope
}

func TestDigestCanonical(t *testing.T) {
	d := func(era, params, meta string) [sha256.Size]byte {
		p, _ := jsonrpc.ParseObject([]byte(params))
		m, _ := jsonrpc.ParseObject([]byte(meta))
		e := uint64(0)
		if era != "2026-07-28" {
			e = uint64(len(era))
		}
		s, err := digest(e, "resources/read", p, m, http.Header{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := d("2026-07-28", `{"uri":"a","x":{"b":1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`)
	same := [][sha256.Size]byte{
		d("2026-07-28", `{ "x" : {"a":[1, 2],"b":1}, "uri":"a" }`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
		// members that do not change an answer are not keyed
		d("2026-07-28", `{"uri":"a","x":{"b":1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7,"traceparent":"00-x","io.modelcontextprotocol/clientInfo":{"name":"n"},"io.modelcontextprotocol/logLevel":"debug"}`),
		// a number is one number however it is written (a tool's arguments)
		d("2026-07-28", `{"uri":"a","x":{"b":1.0,"a":[1e0,20E-1]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
		d("2026-07-28", `{"uri":"a","x":{"b":0.1e1,"a":[1.000,0.2e+1]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
	}
	for i, s := range same {
		if s != base {
			t.Errorf("equivalent request %d hashed differently", i)
		}
	}
	different := map[string][sha256.Size]byte{
		"uri":          d("2026-07-28", `{"uri":"b","x":{"b":1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
		"cursor":       d("2026-07-28", `{"uri":"a","x":{"b":1,"a":[1,2]},"cursor":"c"}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
		"version":      d("2026-07-28", `{"uri":"a","x":{"b":1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}`),
		"upstream era": d("2025-11-25", `{"uri":"a","x":{"b":1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
		"capabilities": d("2026-07-28", `{"uri":"a","x":{"b":1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`),
		"unknown meta": d("2026-07-28", `{"uri":"a","x":{"b":1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","example.com/tenant":"t1"}`),
		"number":       d("2026-07-28", `{"uri":"a","x":{"b":1.5,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
		"sign":         d("2026-07-28", `{"uri":"a","x":{"b":-1,"a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
		"string":       d("2026-07-28", `{"uri":"a","x":{"b":"1","a":[1,2]}}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`),
	}
	for name, s := range different {
		if s == base {
			t.Errorf("a different %s hashed the same", name)
		}
	}
	// Numbers past float64's precision stay apart; zeros meet.
	if d("", `{"x":{"n":12345678901234567890}}`, `{}`) == d("", `{"x":{"n":12345678901234567891}}`, `{}`) ||
		d("", `{"x":{"n":0.1}}`, `{}`) == d("", `{"x":{"n":0.10000000000000000001}}`, `{}`) {
		t.Error("two different numbers hashed the same")
	}
	if d("", `{"x":{"n":0}}`, `{}`) != d("", `{"x":{"n":-0.0e5}}`, `{}`) || d("", `{"x":{"n":100}}`, `{}`) != d("", `{"x":{"n":1e2}}`, `{}`) {
		t.Error("equal numbers hashed differently")
	}
	// A lone surrogate is kept apart from another, and from U+FFFD, which
	// Go's decoding makes of each (JavaScript tells them apart).
	if d("", `{"x":{"q":"\ud800"}}`, `{}`) == d("", `{"x":{"q":"\udbff"}}`, `{}`) || d("", `{"x":{"q":"\uD800"}}`, `{}`) == d("", `{"x":{"q":"\ufffd"}}`, `{}`) ||
		d("", "{\"x\":{\"q\":\"\xff\"}}", `{}`) == d("", `{"x":{"q":"\ufffd"}}`, `{}`) {
		t.Error("strings that decode to U+FFFD hashed the same")
	}
	if d("", `{"x":{"q":"\u00e9"}}`, `{}`) != d("", `{"x":{"q":"é"}}`, `{}`) {
		t.Error("two spellings of one string hashed differently")
	}
	// No collision by concatenation.
	if d("v", `{"uri":"a:b"}`, `{}`) == d("v:a", `{"uri":"b"}`, `{}`) || d("", `{"a":"bc"}`, `{}`) == d("", `{"ab":"c"}`, `{}`) {
		t.Error("concatenation collision")
	}
	// Forwarded headers are keyed, credentials are not (they key the
	// fingerprint instead).
	h1, h2 := http.Header{"X-Tenant": {"a"}, "Authorization": {"A"}}, http.Header{"X-Tenant": {"b"}, "Authorization": {"B"}}
	p, _ := jsonrpc.ParseObject([]byte(`{"uri":"a"}`))
	creds := map[string]bool{"Authorization": true}
	k1, _ := digest(0, "m", p, nil, h1, []string{"x-tenant", "Authorization"}, creds)
	k2, _ := digest(0, "m", p, nil, h2, []string{"x-tenant", "Authorization"}, creds)
	h2.Set("X-Tenant", "a")
	k3, _ := digest(0, "m", p, nil, h2, []string{"x-tenant", "Authorization"}, creds)
	if k1 == k2 || k1 != k3 {
		t.Error("forwarded headers are not keyed as they should be")
	}
}

func TestFingerprintNeverTheToken(t *testing.T) {
	f := newFingerprinter([]byte("s"), []string{"authorization"})
	a := f.of(http.Header{"Authorization": {"Bearer secret-token-A"}}, "")
	b := f.of(http.Header{"Authorization": {"Bearer secret-token-B"}}, "")
	if a == b || strings.Contains(a, "secret") || len(a) != 32 {
		t.Errorf("fingerprints %q %q", a, b)
	}
	if g := newFingerprinter([]byte("other"), []string{"Authorization"}).of(http.Header{"Authorization": {"Bearer secret-token-A"}}, ""); g == a {
		t.Error("the fingerprint does not depend on the secret")
	}
	// A principal keys the caller whatever its token, and is never a
	// credential's fingerprint.
	pa := f.of(http.Header{"Authorization": {"Bearer secret-token-A"}}, `["iss","alice"]`)
	pb := f.of(http.Header{"Authorization": {"Bearer secret-token-B"}}, `["iss","alice"]`)
	pc := f.of(http.Header{"Authorization": {"Bearer secret-token-A"}}, `["iss","bob"]`)
	if pa != pb || pa == pc || pa == a || strings.Contains(pa, "alice") {
		t.Errorf("principal fingerprints %q %q %q (credential %q)", pa, pb, pc, a)
	}
}

// Two caches sharing one Redis behave as two replicas: one fills, the other
// is served from Redis with Redis's remaining time; an invalidation on one
// reaches the other's memory tier; a dropped subscription flushes it.
func TestReplicasShareRedis(t *testing.T) {
	rs := redistest.Start(t)
	a, b := newCache(t, testOptions(rs.URL()), nil), newCache(t, testOptions(rs.URL()), nil)
	up := &upstream{ttlMs: 10_000, scope: "public"}
	r := read("test://x", "")
	text, _, _ := get(t, a, r, up.fill(r))
	a.redis.pending.Wait() // the write to Redis is asynchronous
	got, ttl, _ := get(t, b, r, up.fill(r))
	if got != text || up.calls.Load() != 1 {
		t.Fatalf("replica b read %q (upstream calls %d), want replica a's %q", got, up.calls.Load(), text)
	}
	if b.stat("up").redisHits.Load() == 0 || ttl > 10_000 || ttl < 8_000 {
		t.Errorf("b: shared hits %d, ttl %d", b.stat("up").redisHits.Load(), ttl)
	}
	// b now has it in memory too.
	get(t, b, r, up.fill(r))
	if b.stat("up").memHits.Load() == 0 {
		t.Error("an entry read from Redis was not kept in memory")
	}

	calls := up.calls.Load()
	a.Invalidate(context.Background(), "up", "test://x")
	eventually(t, func() bool {
		before := up.calls.Load()
		get(t, b, r, up.fill(r))
		return up.calls.Load() > before
	})
	if up.calls.Load() <= calls {
		t.Error("the invalidation did not reach replica b")
	}

	// A dropped subscription makes b's memory entries stale (it may have
	// missed invalidations): its next read comes from Redis, not memory.
	get(t, b, r, up.fill(r))
	memBefore := b.stat("up").memHits.Load()
	if n, err := rs.Client().ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result(); err != nil || n == 0 {
		t.Fatalf("CLIENT KILL: %d, %v", n, err)
	}
	eventually(t, func() bool {
		sharedBefore := b.stat("up").redisHits.Load()
		get(t, b, r, up.fill(r))
		return b.stat("up").redisHits.Load() > sharedBefore
	})
	if b.stat("up").memHits.Load() < memBefore {
		t.Fatal("counters went backwards")
	}
}

func eventually(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// A value copied in Redis from one key to another (one credential's private
// entry planted under another's key) is refused: every value carries its own
// key, scope and fingerprint.
func TestSharedValueIdentityChecked(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testOptions(rs.URL())
	a := newCache(t, cfg, nil)
	up := &upstream{ttlMs: 60_000, scope: "private"}
	ra, rb := read("test://p", "token-A"), read("test://p", "token-B")
	get(t, a, ra, up.fill(ra))
	rc := rs.Client()
	ctx := context.Background()
	var keys []string
	eventually(t, func() bool {
		keys = rc.Keys(ctx, "t:*:private:*").Val()
		return len(keys) == 1
	})
	// Plant A's value under B's private key.
	keyB := strings.Replace(keys[0], a.fp.of(ra.Req.Header, ""), a.fp.of(rb.Req.Header, ""), 1)
	if n, err := rc.Copy(ctx, keys[0], keyB, 0, false).Result(); err != nil || n != 1 {
		t.Fatalf("COPY: %v", err)
	}
	b := newCache(t, cfg, nil)
	text, _, _ := get(t, b, rb, up.fill(rb))
	if !strings.Contains(text, "token-B") {
		t.Errorf("B was served %q", text)
	}
}

// An invalidation that races a fill wins: the fill that started before it
// lands unreachable.
func TestInvalidationBeatsRacingFill(t *testing.T) {
	rs := redistest.Start(t)
	c := newCache(t, testOptions(rs.URL()), nil)
	up := &upstream{ttlMs: 60_000, scope: "public", gate: make(chan struct{})}
	r := read("test://race", "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, c, r, up.fill(r))
	}()
	eventually(t, func() bool { return up.calls.Load() == 1 }) // the fill is in flight
	c.Invalidate(context.Background(), "up", "test://race")
	close(up.gate)
	<-done
	// The fill's asynchronous Redis write lands, under the generation it
	// began with; neither tier may serve it.
	c.redis.pending.Wait()
	c.flushMemory()
	get(t, c, r, up.fill(r))
	if up.calls.Load() != 2 {
		t.Errorf("after an invalidation that raced the fill, upstream calls = %d, want 2", up.calls.Load())
	}
}

// With Redis gone, requests go on from memory and the upstream, no error
// reaches the caller, the breaker opens and the outage is logged once; when
// Redis is back, it is used again and the recovery is logged.
func TestRedisDownIsNotAnError(t *testing.T) {
	rs := redistest.Start(t)
	var logs syncBuf
	c := newCache(t, testOptions(rs.URL()), &logs)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	rs.Stop()
	for i := 0; i < 20; i++ {
		r := read(fmt.Sprintf("test://down/%d", i), "")
		start := time.Now()
		if _, err := c.Get(context.Background(), r, up.fill(r)); err != nil {
			t.Fatalf("Get with Redis down: %v", err)
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("a request with Redis down took %v", time.Since(start))
		}
	}
	if !c.redis.brk.Open() {
		t.Error("breaker not open with Redis down")
	}
	if n := strings.Count(logs.String(), "redis unavailable"); n != 1 {
		t.Errorf("outage logged %d times", n)
	}
	rs.Restart()
	n := 0
	eventually(t, func() bool {
		n++
		r := read(fmt.Sprintf("test://up-again/%d", n), "") // a miss in memory asks Redis
		_, _ = c.Get(context.Background(), r, up.fill(r))
		return !c.redis.brk.Open()
	})
	if !strings.Contains(logs.String(), "redis recovered") {
		t.Error("recovery not logged")
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The memory tier alone: stale entries, errors and input_required.
func TestMemoryOnlySemantics(t *testing.T) {
	cfg := testOptions("")
	clk := newClock()
	cfg.Clock = clk.now
	c := newCache(t, cfg, nil)
	up := &upstream{ttlMs: 300, scope: "public"}
	r := read("test://m", "")
	get(t, c, r, up.fill(r))
	c.mem.(*ristrettoMemory).c.Wait()
	get(t, c, r, up.fill(r))
	if up.calls.Load() != 1 {
		t.Fatalf("second read within ttl called the upstream (%d calls)", up.calls.Load())
	}
	clk.advance(350 * time.Millisecond)
	// Past freshness, the upstream fails: the stale entry is served with
	// ttlMs 0. An answer (a JSON-RPC error) is passed on instead.
	down := func(context.Context) (json.RawMessage, error) { return nil, fmt.Errorf("dial: %w", ErrUnreachable) }
	text, ttl, _ := get(t, c, r, down)
	if ttl != 0 || !strings.Contains(text, "call 1") || c.stat("up").stale.Load() != 1 {
		t.Errorf("stale: %q ttl %d", text, ttl)
	}
	answer := func(context.Context) (json.RawMessage, error) { return nil, jsonrpc.Errorf(-32602, "gone") }
	if _, err := c.Get(context.Background(), r, answer); err == nil {
		t.Error("an upstream's error answer was replaced by a stale entry")
	}
	// An upstream that answered, with a refusal, is not unreachable: its
	// answer stands (a revoked credential keeps nothing).
	refused := func(context.Context) (json.RawMessage, error) { return nil, errors.New("HTTP 401") }
	if _, err := c.Get(context.Background(), r, refused); err == nil {
		t.Error("a refusal was answered with a stale entry")
	}
	// The error evicted nothing: still stale-servable.
	if _, ttl, _ := get(t, c, r, down); ttl != 0 {
		t.Errorf("ttl %d", ttl)
	}
	// input_required is passed on and never stored.
	mrtr := &atomic.Int64{}
	ask := func(context.Context) (json.RawMessage, error) {
		mrtr.Add(1)
		return json.RawMessage(`{"resultType":"input_required","requestState":"s","ttlMs":60000,"cacheScope":"public"}`), nil
	}
	rq := read("test://ask", "")
	for i := 0; i < 2; i++ {
		if _, err := c.Get(context.Background(), rq, ask); err != nil {
			t.Fatal(err)
		}
		c.mem.(*ristrettoMemory).c.Wait()
	}
	if mrtr.Load() != 2 {
		t.Errorf("input_required was cached (%d calls)", mrtr.Load())
	}
}

// An invalidation made while Redis was unreachable is not lost: once Redis
// is back, nothing written before it is served, from Redis or memory.
func TestMissedInvalidationRetiresSharedEntries(t *testing.T) {
	rs := redistest.Start(t)
	c := newCache(t, testOptions(rs.URL()), nil)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	r := read("test://x", "")
	before, _, _ := get(t, c, r, up.fill(r))
	c.redis.pending.Wait()   // the write to Redis is asynchronous
	for i := 0; i < 5; i++ { // Redis unreachable: the breaker opens
		c.redis.brk.Failure()
	}
	c.Invalidate(context.Background(), "up", "test://x")
	time.Sleep(300 * time.Millisecond) // past the cooldown
	for i := 0; i < 3; i++ {
		if text, _, _ := get(t, c, r, up.fill(r)); text == before {
			t.Fatalf("read %d after the invalidation served the old answer", i)
		}
	}
}

// A read that starts after an invalidation does not join a fill that
// started before it.
func TestFlightDoesNotSpanInvalidation(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	up := &upstream{ttlMs: 60_000, scope: "public", gate: make(chan struct{})}
	r := read("test://f", "")
	first := make(chan string, 1)
	go func() { s, _, _ := get(t, c, r, up.fill(r)); first <- s }()
	eventually(t, func() bool { return up.calls.Load() == 1 })
	c.Invalidate(context.Background(), "up", "test://f")
	second := make(chan string, 1)
	go func() { s, _, _ := get(t, c, r, up.fill(r)); second <- s }()
	eventually(t, func() bool { return up.calls.Load() == 2 }) // a fill of its own
	close(up.gate)
	if a, b := <-first, <-second; a == b {
		t.Errorf("the read begun after the invalidation got %q, the answer of the fill begun before it", b)
	}
}

// A caller that waited on another's fill gets the answer without that
// request's own _meta (its trace context, its progress token).
func TestCollapsedWaiterGetsNoForeignMeta(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	gate := make(chan struct{})
	var calls atomic.Int64
	fill := func(ctx context.Context) (json.RawMessage, error) {
		calls.Add(1)
		<-gate
		return json.RawMessage(`{"resultType":"complete","ttlMs":60000,"cacheScope":"public","contents":[],"_meta":{"traceparent":"00-LEADER","progressToken":"tok-A","kept":1}}`), nil
	}
	results := make(chan string, 2)
	go func() {
		res, _ := c.Get(context.Background(), read("test://m", ""), fill)
		results <- "leader " + string(res)
	}()
	eventually(t, func() bool { return calls.Load() == 1 })
	go func() {
		res, _ := c.Get(context.Background(), read("test://m", "other"), fill)
		results <- "waiter " + string(res)
	}()
	awaitWaiters(t, c, 2)
	close(gate)
	for i := 0; i < 2; i++ {
		r := <-results
		if strings.HasPrefix(r, "waiter") && (strings.Contains(r, "LEADER") || strings.Contains(r, "tok-A") || !strings.Contains(r, `"kept":1`)) {
			t.Errorf("%s", r)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("calls %d", calls.Load())
	}
}

// A slow Redis (here, one that stops answering for 1.5 s) costs a request
// little more than a miss: commands time out, the breaker opens, and every
// request is answered from memory or the upstream, without error.
func TestSlowRedisCostsLittle(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testOptions(rs.URL())
	cfg.Redis.Timeout = 50 * time.Millisecond
	c := newCache(t, cfg, nil)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	go func() { _ = rs.Client().Do(context.Background(), "DEBUG", "SLEEP", "1.5").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: rs.Addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	eventually(t, func() bool { return probe.Ping(context.Background()).Err() != nil }) // the server is asleep
	var slowest time.Duration
	for i := 0; i < 20; i++ {
		r := read(fmt.Sprintf("test://slow/%d", i), "")
		start := time.Now()
		if _, err := c.Get(context.Background(), r, up.fill(r)); err != nil {
			t.Fatalf("Get with Redis asleep: %v", err)
		}
		slowest = max(slowest, time.Since(start))
	}
	if slowest > 500*time.Millisecond {
		t.Errorf("a request with Redis asleep took %v", slowest)
	}
	if !c.redis.brk.Open() {
		t.Error("the breaker did not open on a Redis that stopped answering")
	}
}

// An answer that may not be stored (input_required) belongs to the request
// that asked: a caller that joined the fill gets its own, never another
// request's requestState.
func TestNoCollapseOnInputRequired(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	gate := make(chan struct{})
	var calls atomic.Int64
	fill := func(ctx context.Context) (json.RawMessage, error) {
		n := calls.Add(1)
		if n == 1 {
			<-gate
		}
		return json.RawMessage(fmt.Sprintf(`{"resultType":"input_required","requestState":"state-%d","inputRequests":{}}`, n)), nil
	}
	r := read("test://ask", "token-A")
	results := make(chan string, 2)
	go func() { res, _ := c.Get(context.Background(), r, fill); results <- string(res) }()
	eventually(t, func() bool { return calls.Load() == 1 })
	go func() { res, _ := c.Get(context.Background(), r, fill); results <- string(res) }()
	awaitWaiters(t, c, 2) // the second caller is waiting on the first fill
	close(gate)
	a, b := <-results, <-results
	if a == b || calls.Load() != 2 {
		t.Errorf("two callers got %q and %q from %d fills: an input_required answer was shared", a, b, calls.Load())
	}
}

// A caller that missed while another's fill was finishing finds the entry
// inside the flight instead of filling again (as groupcache looks again).
func TestLookupAgainInsideFlight(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	r := read("test://again", "")
	get(t, c, r, up.fill(r))
	// A second lookup that missed in memory just before the entry landed:
	// fillOnce is where it would call the upstream again.
	l, err := c.newLookup(r, c.stat("up"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.fillOnce(context.Background(), l, up.fill(r))
	if err != nil || o.err != nil {
		t.Fatal(err, o.err)
	}
	if up.calls.Load() != 1 {
		t.Errorf("a fill found the entry already in memory and still called the upstream (%d calls)", up.calls.Load())
	}
}

// A full generation table is reset together with a memory flush, and the
// flush is never later than the reset: a lookup right after the raise that
// resets (before anything else runs) must not find an entry invalidated
// before it.
func TestGenerationResetCannotResurrect(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	r := read("test://old", "")
	get(t, c, r, up.fill(r))
	c.Invalidate(context.Background(), "up", "test://old") // the entry is unreachable now
	for i := 0; c.gens.size() < maxGenerations; i++ {
		c.gens.raise(fmt.Sprintf("filler-%d", i), 0)
	}
	if _, reset := c.gens.raise("another", 0); !reset {
		t.Fatal("the table did not reset at its bound")
	}
	l, err := c.newLookup(r, c.stat("up"))
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := c.fromMemory(l, c.now()); ok {
		t.Errorf("right after the reset, an invalidated entry was found: %s", res)
	}
}

// Revalidate ends the freshness of an upstream's entries, here and on a
// replica sharing Redis, without taking them away from stale-if-error.
func TestRevalidateKeepsStale(t *testing.T) {
	rs := redistest.Start(t)
	o := testOptions(rs.URL())
	o.StaleIfError = time.Minute
	a, b := newCache(t, o, nil), newCache(t, o, nil)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	r := read("test://r", "")
	first, _, _ := get(t, a, r, up.fill(r))
	a.redis.pending.Wait()   // the write to Redis is asynchronous
	get(t, b, r, up.fill(r)) // b has it in memory too
	a.Revalidate(context.Background(), "up")
	down := func(context.Context) (json.RawMessage, error) { return nil, fmt.Errorf("dial: %w", ErrUnreachable) }
	for _, c := range []*Cache{a, b} {
		eventually(t, func() bool {
			text, ttl, _ := get(t, c, r, down)
			return text == first && ttl == 0 // stale, served because the upstream is down
		})
	}
	for name, c := range map[string]*Cache{"a": a, "b": b} {
		if text, _, _ := get(t, c, r, up.fill(r)); text == first {
			t.Errorf("replica %s: still fresh after Revalidate", name)
		}
	}
}

// When the invalidation channel comes back after a loss, invalidations may
// have been missed in between: memory entries stop being fresh, but still
// stand in for an upstream that cannot be reached, as after a watch drop.
func TestChannelLossKeepsStaleIfError(t *testing.T) {
	rs := redistest.Start(t)
	var logs syncBuf
	c := newCache(t, testOptions(rs.URL()), &logs)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	r := read("test://kept", "")
	get(t, c, r, up.fill(r))
	c.redis.pending.Wait() // the entry is in Redis before Redis goes
	rs.Restart()           // and its data is gone with it
	eventually(t, func() bool { return strings.Contains(logs.String(), "re-established") })
	down := func(context.Context) (json.RawMessage, error) { return nil, fmt.Errorf("dial: %w", ErrUnreachable) }
	text, ttl, _ := get(t, c, r, down)
	if ttl != 0 || !strings.Contains(text, "call 1") {
		t.Errorf("with the upstream down after the channel came back: %q ttl %d, want the stale entry", text, ttl)
	}
	if text, _, _ := get(t, c, r, up.fill(r)); !strings.Contains(text, "call 2") {
		t.Errorf("a reachable upstream was not asked again: %q", text)
	}
}

// A fill that began before a Revalidate (a reload, a watch that dropped)
// may carry what the revalidation was about: it lands stale, in memory and
// in Redis, however long after it its answer arrives.
func TestFillRacingRevalidationLandsStale(t *testing.T) {
	rs := redistest.Start(t)
	c := newCache(t, testOptions(rs.URL()), nil)
	up := &upstream{ttlMs: 60_000, scope: "public", gate: make(chan struct{})}
	r := read("test://racing", "")
	filled := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), r, up.fill(r))
		filled <- err
	}()
	eventually(t, func() bool { return up.calls.Load() == 1 }) // the fill is under way
	c.Revalidate(context.Background(), "up")
	close(up.gate)
	if err := <-filled; err != nil {
		t.Fatal(err)
	}
	c.redis.pending.Wait() // the write to Redis is asynchronous
	// Another replica, without memory, reading Redis.
	o := testOptions(rs.URL())
	o.MemoryBytes = 0
	other := newCache(t, o, nil)
	if text, _, _ := get(t, other, r, up.fill(r)); !strings.Contains(text, "call 2") {
		t.Errorf("Redis served the racing fill as fresh: %q", text)
	}
	// (Its own memory has the racing fill: it is stale, so this replica
	// goes to Redis, which now holds the other's fresh one.)
	if text, _, _ := get(t, c, r, up.fill(r)); strings.Contains(text, "call 1") {
		t.Errorf("memory served the racing fill as fresh: %q", text)
	}
}

// awaitWaiters waits until n callers wait on one fill (its own caller and
// those that joined it).
func awaitWaiters(t *testing.T, c *Cache, n int) {
	t.Helper()
	eventually(t, func() bool {
		c.flight.mu.Lock()
		defer c.flight.mu.Unlock()
		for _, call := range c.flight.calls {
			if call.waiters >= n {
				return true
			}
		}
		return false
	})
}

// An answer too large to store is still one answer: the misses that
// joined its fill share it instead of each asking the upstream again (a
// public one across credentials; a private one only with its own).
func TestOversizedAnswerStillCoalesces(t *testing.T) {
	o := testOptions("")
	o.MaxEntryBytes = 1 << 10
	c := newCache(t, o, nil)
	big := strings.Repeat("x", 4<<10)
	for _, scope := range []string{"public", "private"} {
		gate := make(chan struct{})
		var calls atomic.Int64
		fill := func(ctx context.Context) (json.RawMessage, error) {
			calls.Add(1)
			<-gate
			return json.RawMessage(fmt.Sprintf(`{"resultType":"complete","ttlMs":60000,"cacheScope":%q,"contents":[{"uri":"test://big","text":%q}]}`, scope, big)), nil
		}
		var wg sync.WaitGroup
		for i := 0; i < 5; i++ {
			wg.Go(func() {
				res, err := c.Get(context.Background(), read("test://big-"+scope, ""), fill)
				if err != nil || !strings.Contains(string(res), big) {
					t.Errorf("%s: %v %.80s", scope, err, res)
				}
			})
		}
		awaitWaiters(t, c, 5)
		close(gate)
		wg.Wait()
		if calls.Load() != 1 {
			t.Errorf("%s: 5 concurrent misses of a large answer made %d upstream calls, want 1", scope, calls.Load())
		}
	}
}

// A fill runs on a goroutine of its own, where no handler's recovery
// reaches: a panic in it is the error of every caller waiting for it, and
// the process, and the key, go on.
func TestPanickingFillIsContained(t *testing.T) {
	c := newCache(t, testOptions(""), nil)
	gate := make(chan struct{})
	boom := func(context.Context) (json.RawMessage, error) {
		<-gate
		var m map[string]int
		m["boom"]++
		return nil, nil
	}
	r := read("test://boom", "")
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { _, err := c.Get(context.Background(), r, boom); errs <- err }()
	}
	awaitWaiters(t, c, 3)
	close(gate)
	for i := 0; i < 3; i++ {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "panic") {
			t.Errorf("waiter %d: %v", i, err)
		}
	}
	up := &upstream{ttlMs: 60_000, scope: "public"}
	if text, _, _ := get(t, c, r, up.fill(r)); !strings.Contains(text, "call 1") {
		t.Errorf("after the panic: %q", text)
	}
}

// cache.max_ttl caps how long any ttlMs keeps an entry, in both tiers, and
// what every answer says of it: an upstream's 60 s is 1 s here.
func TestMaxTTLCaps(t *testing.T) {
	o := testOptions("")
	o.MaxTTL = time.Second
	clk := newClock()
	o.Clock = clk.now
	c := newCache(t, o, nil)
	up := &upstream{ttlMs: 60_000, scope: "public"}
	r := read("test://capped", "")
	if _, ttl, _ := get(t, c, r, up.fill(r)); ttl > 1000 {
		t.Errorf("the filling answer says ttlMs %d, over max_ttl", ttl)
	}
	if _, ttl, _ := get(t, c, r, up.fill(r)); ttl > 1000 || up.calls.Load() != 1 {
		t.Errorf("a hit says ttlMs %d (%d upstream calls)", ttl, up.calls.Load())
	}
	clk.advance(1100 * time.Millisecond)
	if get(t, c, r, up.fill(r)); up.calls.Load() != 2 {
		t.Errorf("memory served past max_ttl (%d upstream calls)", up.calls.Load())
	}

	rs := redistest.Start(t)
	ro := testOptions(rs.URL())
	ro.MaxTTL, ro.MemoryBytes = time.Second, 0
	shared := newCache(t, ro, nil)
	get(t, shared, r, up.fill(r))
	shared.redis.pending.Wait()
	before := up.calls.Load()
	eventually(t, func() bool { // Redis counts by its own clock
		get(t, shared, r, up.fill(r))
		return up.calls.Load() > before
	})
}

// With encrypt_private, a private answer is sealed in Redis under a key of
// its caller's: what Redis holds is not the answer; a replica with the
// secret serves it to that caller as a Redis hit, and to nobody else; a
// replica that does not seal, or a value tampered with, is a miss, never
// an error or a wrong answer.
func TestSealedPrivateEntries(t *testing.T) {
	rs := redistest.Start(t)
	sealing := func(memory bool, seal bool) *Cache {
		o := testOptions(rs.URL())
		o.Redis.EncryptPrivate = seal
		if !memory {
			o.MemoryBytes = 0
		}
		return newCache(t, o, nil)
	}
	a := sealing(true, true)
	up := &upstream{ttlMs: 60_000, scope: "private"}
	alice := read("test://sealed", "alice")
	text, _, _ := get(t, a, alice, up.fill(alice))
	b := sealing(false, true)
	eventually(t, func() bool { return tryGet(b, alice) }) // the write is asynchronous
	if got, _, _ := get(t, b, alice, up.fill(alice)); got != text || up.calls.Load() != 1 {
		t.Fatalf("replica b served alice %q (%d upstream calls)", got, up.calls.Load())
	}
	keys, _ := rs.Client().Keys(context.Background(), "*").Result()
	var sealed []string
	for _, k := range keys {
		v, _ := rs.Client().Get(context.Background(), k).Bytes()
		if bytes.Contains(v, []byte(strings.TrimPrefix(text, "for "))) {
			t.Errorf("Redis holds the private answer in clear under %s", k)
		}
		if len(v) > 64 {
			sealed = append(sealed, k)
		}
	}
	bob := read("test://sealed", "bob")
	if got, _, _ := get(t, b, bob, up.fill(bob)); strings.Contains(got, "alice") {
		t.Errorf("bob was served %q", got)
	}
	// A sealed value tampered with (one byte of it flipped) is a miss for a
	// sealing replica, filled again.
	for _, k := range sealed {
		v, _ := rs.Client().Get(context.Background(), k).Bytes()
		v[len(v)-1] ^= 1
		rs.Client().Set(context.Background(), k, v, time.Minute)
	}
	calls := up.calls.Load()
	if got, _, _ := get(t, sealing(false, true), alice, up.fill(alice)); got == text || up.calls.Load() != calls+1 {
		t.Errorf("a tampered sealed entry served %q (%d upstream calls)", got, up.calls.Load()-calls)
	}
	inRedisSealed := func() bool { return tryGet(sealing(false, true), alice) }
	eventually(t, inRedisSealed)
	// A replica that does not seal cannot open a sealed entry: a miss; and
	// the private entry it writes in clear is one a sealing replica does
	// not take.
	plain := sealing(false, false)
	calls = up.calls.Load()
	if get(t, plain, alice, up.fill(alice)); up.calls.Load() != calls+1 {
		t.Errorf("a replica that does not seal was served the sealed entry")
	}
	eventually(t, func() bool { return tryGet(sealing(false, false), alice) })
	calls = up.calls.Load()
	if get(t, sealing(false, true), alice, up.fill(alice)); up.calls.Load() != calls+1 {
		t.Errorf("a sealing replica took a private entry written in clear")
	}
}

// tryGet reports whether c answers r from the cache alone.
func tryGet(c *Cache, r Request) bool {
	_, err := c.Get(context.Background(), r, func(context.Context) (json.RawMessage, error) { return nil, errors.New("miss") })
	return err == nil
}

// Concurrent misses of one key share one fill across credentials when the
// answer is public, and never when it is private: each credential then gets
// its own answer, filled for it.
func TestCoalescingAcrossCredentials(t *testing.T) {
	for _, scope := range []string{"public", "private"} {
		c := newCache(t, testOptions(""), nil)
		up := &upstream{ttlMs: 60_000, scope: scope, gate: make(chan struct{})}
		tokens := []string{"alice", "bob", "carol"}
		texts := make(chan [2]string, len(tokens))
		for _, tok := range tokens {
			r := read("test://shared-"+scope, tok)
			go func() {
				res, err := c.Get(context.Background(), r, up.fill(r))
				if err != nil {
					t.Error(err)
				}
				texts <- [2]string{tok, string(res)}
			}()
		}
		awaitWaiters(t, c, len(tokens))
		close(up.gate)
		for range tokens {
			got := <-texts
			if scope == "private" && !strings.Contains(got[1], "Bearer "+got[0]) {
				t.Errorf("private: %s was served %s", got[0], got[1])
			}
		}
		want := int64(1)
		if scope == "private" {
			want = 3
		}
		if up.calls.Load() != want {
			t.Errorf("%s: %d upstream calls for three credentials, want %d", scope, up.calls.Load(), want)
		}
	}
}

// Refresh ahead: a read in the last part of an entry's freshness is a hit,
// and starts one background fill, so that the readers after its expiry hit
// the refreshed entry; with refresh off, nothing is filled before expiry.
func TestRefreshAheadKeepsAHotKeyHitting(t *testing.T) {
	for _, mode := range []string{RefreshPublic, RefreshOff} {
		o := testOptions("")
		o.Refresh = mode
		clk := newClock()
		o.Clock = clk.now
		c := newCache(t, o, nil)
		up := &upstream{ttlMs: 10_000, scope: "public"}
		r := read("test://hot", "")
		get(t, c, r, up.fill(r))
		clk.advance(9_600 * time.Millisecond) // in the last tenth
		for i := 0; i < 5; i++ {
			get(t, c, r, up.fill(r))
		}
		if mode == RefreshOff {
			c.refreshes.Wait()
			if up.calls.Load() != 1 {
				t.Errorf("refresh off: %d upstream calls before expiry", up.calls.Load())
			}
			continue
		}
		eventually(t, func() bool { return up.calls.Load() == 2 })
		c.refreshes.Wait()
		clk.advance(1_000 * time.Millisecond) // past the first entry's expiry
		if text, _, _ := get(t, c, r, up.fill(r)); !strings.Contains(text, "call 2") || up.calls.Load() != 2 {
			t.Errorf("after expiry: %q, %d upstream calls; five readers near expiry made one refresh", text, up.calls.Load())
		}
	}
}
