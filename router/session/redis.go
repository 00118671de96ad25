package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/redisbus"
)

// Redis is a Store every replica shares: a session is a key that expires
// after the idle timeout (refreshed on each use), and a pub/sub channel
// carries changes and messages to the replica that needs them.
type Redis struct {
	rdb     redis.UniversalClient
	prefix  string
	bus     redisbus.Bus // the signal channel
	idle    time.Duration
	timeout time.Duration
	log     *slog.Logger

	mu       sync.Mutex
	receive  func(string, *jsonrpc.Message)
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
	// Timeout bounds each command.
	Timeout time.Duration
	Logger  *slog.Logger
}

// signal is what replicas tell each other about a session.
type signal struct {
	ID      string           `json:"id"`
	Changed bool             `json:"c,omitempty"`
	Ended   bool             `json:"e,omitempty"`
	Message *jsonrpc.Message `json:"m,omitempty"`
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
	r := &Redis{rdb: rdb, prefix: o.Prefix + "session:", bus: redisbus.Bus{Client: rdb, Options: &opts, Channel: o.Prefix + "sessions"},
		idle: o.Idle, timeout: o.Timeout, log: o.Logger, stop: stop, done: make(chan struct{})}
	go r.listen(ctx)
	return r
}

func (r *Redis) key(id string) string { return r.prefix + id }

func (r *Redis) Create(ctx context.Context, s *Session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.rdb.Set(ctx, r.key(s.ID), b, r.idle).Err(); err != nil {
		return fmt.Errorf("session store: %w", err)
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

func (r *Redis) remember(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recent == nil || len(r.recent) >= maxRecent {
		r.recent = map[string]recent{}
	}
	r.recent[s.ID] = recent{s: clone(s), until: time.Now().Add(recentFor)}
}

func (r *Redis) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.recent, id)
}

// get reads a session from Redis, refreshing its idle expiry.
func (r *Redis) get(ctx context.Context, id string) (*Session, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	b, err := r.rdb.GetEx(ctx, r.key(id), r.idle).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("session store: %w", err)
	}
	var s Session
	if err := json.Unmarshal(b, &s); err != nil || s.ID != id {
		return nil, ErrUnknown
	}
	return &s, nil
}

func (r *Redis) Update(ctx context.Context, s *Session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	// XX: an update never brings back a session that ended meanwhile.
	r.forget(s.ID)
	ok, err := r.rdb.SetXX(ctx, r.key(s.ID), b, r.idle).Result()
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	if !ok {
		return ErrUnknown
	}
	return r.publish(ctx, signal{ID: s.ID, Changed: true})
}

func (r *Redis) Delete(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	r.forget(id)
	n, err := r.rdb.Del(ctx, r.key(id)).Result()
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	if n == 0 {
		return ErrUnknown
	}
	return r.publish(ctx, signal{ID: id, Ended: true})
}

func (r *Redis) Watch(id string) (<-chan Event, func()) { return r.watchers.add(id) }

func (r *Redis) Send(ctx context.Context, id string, msg *jsonrpc.Message) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.publish(ctx, signal{ID: id, Message: msg})
}

func (r *Redis) Receive(f func(string, *jsonrpc.Message)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.receive = f
}

// Len counts the sessions in Redis, boundedly: it is for a limit and a
// gauge, and a SCAN of every key would cost more than it is worth.
func (r *Redis) Len() int {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	keys, _, err := r.rdb.Scan(ctx, 0, r.prefix+"*", 1000).Result()
	if err != nil {
		return 0
	}
	return len(keys)
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
			receive(s.ID, s.Message)
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
