package session

import (
	"context"
	"sync"
	"time"
)

// Memory is a Store in process: sessions die with it.
type Memory struct {
	idle   time.Duration
	limits Limits
	now    func() time.Time

	mu       sync.Mutex
	sessions map[string]*entry
	shares   map[string]int // open sessions by share
	receive  func(string, Direction, []byte)
	watchers watchers
	stop     chan struct{}
	done     chan struct{}
}

type entry struct {
	s       Session
	expires time.Time
}

// NewMemory returns a store whose sessions expire after idle without use,
// holding at most max of them.
func NewMemory(idle time.Duration, max int) *Memory {
	return NewMemoryLimited(idle, Limits{Max: max})
}

// NewMemoryLimited returns a store whose sessions expire after idle
// without use, within limits.
func NewMemoryLimited(idle time.Duration, limits Limits) *Memory {
	m := &Memory{idle: idle, limits: limits, now: time.Now, sessions: map[string]*entry{}, shares: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go m.sweep()
	return m
}

// sweep ends expired sessions, so their watchers learn of it and memory is
// returned even for sessions nobody asks about again.
func (m *Memory) sweep() {
	defer close(m.done)
	t := time.NewTicker(min(m.idle/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		ended := m.dropExpired()
		m.mu.Unlock()
		m.tellEnded(ended)
	}
}

// dropExpired removes the expired sessions and returns their ids. m.mu is
// held.
func (m *Memory) dropExpired() []string {
	now := m.now()
	var ended []string
	for id, e := range m.sessions {
		if now.After(e.expires) {
			m.remove(id)
			ended = append(ended, id)
		}
	}
	return ended
}

// remove forgets session id, giving its place in its share back. m.mu is
// held.
func (m *Memory) remove(id string) bool {
	e, ok := m.sessions[id]
	if !ok {
		return false
	}
	delete(m.sessions, id)
	if share := e.s.Share; share != "" {
		if m.shares[share]--; m.shares[share] <= 0 {
			delete(m.shares, share)
		}
	}
	return true
}

func (m *Memory) tellEnded(ids []string) {
	for _, id := range ids {
		m.watchers.tell(id, Event{Ended: true})
	}
}

func (m *Memory) Create(_ context.Context, s *Session) error {
	m.mu.Lock()
	var ended []string
	if m.atBound(s.Share) {
		// Expired sessions the sweep has not reached yet count no more.
		ended = m.dropExpired()
	}
	err := m.admit(s.Share)
	if err == nil {
		m.sessions[s.ID] = &entry{s: clone(s), expires: m.now().Add(m.idle)}
		if s.Share != "" {
			m.shares[s.Share]++
		}
	}
	m.mu.Unlock()
	m.tellEnded(ended)
	return err
}

// atBound reports whether a session of share would pass a limit. m.mu is
// held.
func (m *Memory) atBound(share string) bool { return m.admit(share) != nil }

// admit refuses a session of share past a limit, the share's first. m.mu
// is held.
func (m *Memory) admit(share string) error {
	if l := m.limits.PerShare; l > 0 && share != "" && m.shares[share] >= l {
		return &FullError{Share: true, Limit: l}
	}
	if l := m.limits.Max; l > 0 && len(m.sessions) >= l {
		return &FullError{Limit: l}
	}
	return nil
}

func (m *Memory) Get(_ context.Context, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sessions[id]
	if !ok || m.now().After(e.expires) {
		return nil, ErrUnknown
	}
	e.expires = m.now().Add(m.idle)
	s := clone(&e.s)
	return &s, nil
}

func (m *Memory) Update(_ context.Context, s *Session) error {
	m.mu.Lock()
	e, ok := m.sessions[s.ID]
	if ok {
		e.s, e.expires = clone(s), m.now().Add(m.idle)
	}
	m.mu.Unlock()
	if !ok {
		return ErrUnknown
	}
	m.watchers.tell(s.ID, Event{Changed: true})
	return nil
}

func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	ok := m.remove(id)
	m.mu.Unlock()
	if !ok {
		return ErrUnknown
	}
	m.watchers.tell(id, Event{Ended: true})
	return nil
}

func (m *Memory) Watch(id string) (<-chan Event, func()) { return m.watchers.add(id) }

func (m *Memory) Send(_ context.Context, id string, dir Direction, msg []byte) error {
	m.mu.Lock()
	receive := m.receive
	m.mu.Unlock()
	if receive != nil {
		receive(id, dir, msg)
	}
	return nil
}

func (m *Memory) Receive(f func(string, Direction, []byte)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.receive = f
}

// Len is not len(m.sessions): the expired ones are removed only at the
// next sweep, up to a minute later, and are over already (as in Redis).
func (m *Memory) Len() int { return m.Active(m.idle) }

// Active counts the sessions whose expiry was pushed back within the last
// within: an expiry is the last use plus the idle timeout.
func (m *Memory) Active(within time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	since := m.now().Add(m.idle - within)
	n := 0
	for _, e := range m.sessions {
		if e.expires.After(since) {
			n++
		}
	}
	return n
}

func (m *Memory) Close() error {
	close(m.stop)
	<-m.done
	return nil
}

func clone(s *Session) Session {
	c := *s
	c.Subscriptions = append([]string(nil), s.Subscriptions...)
	return c
}

// watchers fans a session's events out to those watching it here. A
// watcher too slow to take an event misses it: events say "look again",
// and a watcher that looks again sees the latest state.
type watchers struct {
	mu   sync.Mutex
	byID map[string]map[chan Event]struct{}
}

// watchQueue is how many events may wait for one watcher.
const watchQueue = 16

func (w *watchers) add(id string) (<-chan Event, func()) {
	ch := make(chan Event, watchQueue)
	w.mu.Lock()
	if w.byID == nil {
		w.byID = map[string]map[chan Event]struct{}{}
	}
	if w.byID[id] == nil {
		w.byID[id] = map[chan Event]struct{}{}
	}
	w.byID[id][ch] = struct{}{}
	w.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(w.byID[id], ch)
			if len(w.byID[id]) == 0 {
				delete(w.byID, id)
			}
		})
	}
}

func (w *watchers) tell(id string, ev Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.byID[id] {
		select {
		case ch <- ev:
		default:
		}
	}
}
