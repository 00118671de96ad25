package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/redisbus"
)

// Redis is a Store every replica shares: a session is a hash that expires
// after the idle timeout (refreshed on each use), counted in a sorted set of
// all sessions and one of its share, both scored by expiry; a pub/sub
// channel carries changes and messages to the replica that needs them.
// Every key shares one hash tag, so that the scripts which keep a session
// and its counts in step run whole on one node of a Cluster.
type Redis struct {
	rdb     redis.UniversalClient
	tag     string       // starts every key
	bus     redisbus.Bus // the signal channel
	idle    time.Duration
	limits  Limits
	timeout time.Duration
	log     *slog.Logger
	// keep is how long a recent copy serves: recentFor, or less when
	// sessions expire soon, as a copy read does not refresh the expiry.
	keep time.Duration

	mu       sync.Mutex
	receive  func(string, Direction, []byte)
	recent   map[string]recent // sessions read within recentFor
	watchers watchers
	stop     context.CancelFunc
	done     chan struct{}
}

// recent is a session read lately. Reading it from Redis for every request
// would double a cache hit's cost; a change made anywhere reaches every
// replica over pub/sub and drops its copy, so a copy is at worst as old as
// that message's delay, and never older than recentFor.
type recent struct {
	s     Session
	until time.Time
}

const (
	recentFor = time.Second
	maxRecent = 10_000
)

// RedisOptions configure a Redis store.
type RedisOptions struct {
	Client redis.UniversalOptions
	// Prefix starts every key and the channel.
	Prefix string
	// Idle is how long an unused session lives.
	Idle time.Duration
	// Limits bound the sessions of every replica together.
	Limits Limits
	// Timeout bounds each command.
	Timeout time.Duration
	Logger  *slog.Logger
}

// signal is what replicas tell each other about a session.
type signal struct {
	ID      string          `json:"id"`
	Changed bool            `json:"c,omitempty"`
	Ended   bool            `json:"e,omitempty"`
	Dir     Direction       `json:"d,omitempty"`
	Message json.RawMessage `json:"msg,omitempty"`
}

// NewRedis connects a store and starts listening to the other replicas.
func NewRedis(o RedisOptions) *Redis {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	opts := o.Client
	opts.ReadTimeout, opts.WriteTimeout = o.Timeout, o.Timeout
	ctx, stop := context.WithCancel(context.Background())
	rdb := redis.NewUniversalClient(&opts)
	r := &Redis{rdb: rdb, tag: o.Prefix + "{sessions}:", bus: redisbus.Bus{Client: rdb, Options: &opts, Channel: o.Prefix + "sessions"},
		idle: o.Idle, limits: o.Limits, timeout: o.Timeout, log: o.Logger, keep: min(recentFor, o.Idle/4), stop: stop, done: make(chan struct{})}
	go r.listen(ctx)
	return r
}

func (r *Redis) key(id string) string { return r.tag + "s:" + id }

// all is the sorted set of every session, scored by expiry (ms, Redis's
// clock).
func (r *Redis) all() string { return r.tag + "all" }

// share is the sorted set of the sessions of one share, as all is.
func (r *Redis) share(name string) string { return r.tag + "by:" + name }

// createScript stores a session unless a limit refuses it (1: its share's,
// 2: the store's). Expired sessions leave the counts first: a session's
// score is its key's expiry, set together.
// KEYS: session, all, share. ARGV: id, value, idle ms, per-share limit,
// limit, share.
var createScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local idle, per, max = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[6] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if per > 0 and redis.call('ZCARD', KEYS[3]) >= per then return 1 end
end
if max > 0 and redis.call('ZCARD', KEYS[2]) >= max then return 2 end
redis.call('HSET', KEYS[1], 's', ARGV[2], 'q', ARGV[6])
redis.call('PEXPIRE', KEYS[1], idle)
redis.call('ZADD', KEYS[2], now + idle, ARGV[1])
if ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[3], now + idle, ARGV[1])
  redis.call('PEXPIRE', KEYS[3], idle)
end
return 0
`)

func (r *Redis) Create(ctx context.Context, s *Session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	res, err := createScript.Run(ctx, r.rdb, []string{r.key(s.ID), r.all(), r.share(s.Share)},
		s.ID, b, r.idle.Milliseconds(), r.limits.PerShare, r.limits.Max, s.Share).Int()
	switch {
	case err != nil:
		return fmt.Errorf("session store: %w", err)
	case res == 1:
		return &FullError{Share: true, Limit: r.limits.PerShare}
	case res == 2:
		return &FullError{Limit: r.limits.Max}
	}
	return nil
}

func (r *Redis) Get(ctx context.Context, id string) (*Session, error) {
	r.mu.Lock()
	c, ok := r.recent[id]
	r.mu.Unlock()
	if ok && time.Now().Before(c.until) {
		s := clone(&c.s)
		return &s, nil
	}
	s, err := r.get(ctx, id)
	if err == nil {
		r.remember(s)
	}
	return s, err
}

// remember keeps a copy of s, unless s is not initialized yet: its one
// change, initialize, is answered on the session's stream, perhaps by the
// replica that made it, and the caller's next request may reach this one
// before the change's signal does. A copy would refuse it as not
// initialized; the read costs a round trip for one request or two.
func (r *Redis) remember(s *Session) {
	if s.Version == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recent == nil || len(r.recent) >= maxRecent {
		r.recent = map[string]recent{}
	}
	r.recent[s.ID] = recent{s: clone(s), until: time.Now().Add(r.keep)}
}

func (r *Redis) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.recent, id)
}

// touchScript reads a session and refreshes its expiry and its score in
// all; it answers the value, the share and the new expiry, or nil.
// KEYS: session, all. ARGV: id, idle ms.
var touchScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 's', 'q')
if not v[1] then return false end
local t = redis.call('TIME')
local expires = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], 'XX', expires, ARGV[1])
return {v[1], v[2] or '', tostring(expires)}
`)

// get reads a session from Redis, refreshing its idle expiry and its
// scores.
func (r *Redis) get(ctx context.Context, id string) (*Session, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	res, err := touchScript.Run(ctx, r.rdb, []string{r.key(id), r.all()}, id, r.idle.Milliseconds()).StringSlice()
	if errors.Is(err, redis.Nil) {
		return nil, ErrUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("session store: %w", err)
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("session store: the read script answered %d values", len(res))
	}
	var s Session
	if err := json.Unmarshal([]byte(res[0]), &s); err != nil || s.ID != id {
		return nil, ErrUnknown
	}
	if share := res[1]; share != "" {
		// A script may only touch the keys it is given, and the share's
		// is known only now. XX: a session deleted meanwhile (which leaves
		// its share's set first) is not counted again.
		if err := r.rescore(ctx, share, id, res[2]); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// rescore moves session id's expiry in its share's set to expires.
func (r *Redis) rescore(ctx context.Context, share, id, expires string) error {
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAddXX(ctx, r.share(share), redis.Z{Score: parseScore(expires), Member: id})
		p.PExpire(ctx, r.share(share), r.idle)
		return nil
	})
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	return nil
}

func parseScore(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// updateScript replaces a session that still exists, refreshing its expiry
// and its scores. KEYS: session, all, share. ARGV: id, value, idle ms, share.
var updateScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local t = redis.call('TIME')
local expires = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 's', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], 'XX', expires, ARGV[1])
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[3], 'XX', expires, ARGV[1])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return 1
`)

func (r *Redis) Update(ctx context.Context, s *Session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	// An update never brings back a session that ended meanwhile.
	r.forget(s.ID)
	ok, err := updateScript.Run(ctx, r.rdb, []string{r.key(s.ID), r.all(), r.share(s.Share)}, s.ID, b, r.idle.Milliseconds(), s.Share).Int()
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	if ok == 0 {
		return ErrUnknown
	}
	return r.publish(ctx, signal{ID: s.ID, Changed: true})
}

// deleteScript removes a session and its places in the counts.
// KEYS: session, all, share. ARGV: id, share.
var deleteScript = redis.NewScript(`
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[2] ~= '' then redis.call('ZREM', KEYS[3], ARGV[1]) end
return n
`)

func (r *Redis) Delete(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	r.forget(id)
	share, err := r.rdb.HGet(ctx, r.key(id), "q").Result()
	if errors.Is(err, redis.Nil) {
		return ErrUnknown
	}
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	n, err := deleteScript.Run(ctx, r.rdb, []string{r.key(id), r.all(), r.share(share)}, id, share).Int()
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	if n == 0 {
		return ErrUnknown
	}
	return r.publish(ctx, signal{ID: id, Ended: true})
}

func (r *Redis) Watch(id string) (<-chan Event, func()) { return r.watchers.add(id) }

func (r *Redis) Send(ctx context.Context, id string, dir Direction, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.publish(ctx, signal{ID: id, Dir: dir, Message: msg})
}

func (r *Redis) Receive(f func(string, Direction, []byte)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.receive = f
}

// Len counts the sessions in Redis that have not expired.
func (r *Redis) Len() int {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	n, err := r.rdb.ZCount(ctx, r.all(), "("+now, "+inf").Result()
	if err != nil {
		return 0
	}
	return int(n)
}

// Active counts the sessions in Redis used within the last within: a
// session's score is its last use plus the idle timeout.
func (r *Redis) Active(within time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	since := strconv.FormatInt(time.Now().Add(r.idle-within).UnixMilli(), 10)
	n, err := r.rdb.ZCount(ctx, r.all(), "("+since, "+inf").Result()
	if err != nil {
		return 0
	}
	return int(n)
}

func (r *Redis) publish(ctx context.Context, s signal) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := r.rdb.Publish(ctx, r.bus.Channel, b).Err(); err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	return nil
}

// listen delivers the replicas' signals (this one's own included) until
// Close. After an interruption the recent copies are dropped: the changes
// that would have dropped them may have been missed.
func (r *Redis) listen(ctx context.Context) {
	defer close(r.done)
	r.bus.Listen(ctx, r.signal, func() {
		r.log.Warn("session store: signal channel re-established; messages sent in between are lost")
		r.mu.Lock()
		clear(r.recent)
		r.mu.Unlock()
	})
}

func (r *Redis) signal(payload string) {
	var s signal
	if json.Unmarshal([]byte(payload), &s) != nil || s.ID == "" {
		return
	}
	if s.Message != nil {
		r.mu.Lock()
		receive := r.receive
		r.mu.Unlock()
		if receive != nil {
			receive(s.ID, s.Dir, s.Message)
		}
		return
	}
	r.forget(s.ID)
	r.watchers.tell(s.ID, Event{Changed: s.Changed, Ended: s.Ended})
}

func (r *Redis) Close() error {
	r.stop()
	<-r.done
	return r.rdb.Close()
}
