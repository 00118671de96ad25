package session

import (
	"context"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// Memory is a Store in process: sessions die with it.
type Memory struct {
	idle time.Duration
	max  int
	now  func() time.Time

	mu       sync.Mutex
	sessions map[string]*entry
	receive  func(string, *jsonrpc.Message)
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
	m := &Memory{idle: idle, max: max, now: time.Now, sessions: map[string]*entry{}, stop: make(chan struct{}), done: make(chan struct{})}
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
		now := m.now()
		var ended []string
		m.mu.Lock()
		for id, e := range m.sessions {
			if now.After(e.expires) {
				delete(m.sessions, id)
				ended = append(ended, id)
			}
		}
		m.mu.Unlock()
		for _, id := range ended {
			m.watchers.tell(id, Event{Ended: true})
		}
	}
}

func (m *Memory) Create(_ context.Context, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.max > 0 && len(m.sessions) >= m.max {
		return ErrFull
	}
	m.sessions[s.ID] = &entry{s: clone(s), expires: m.now().Add(m.idle)}
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
	_, ok := m.sessions[id]
	delete(m.sessions, id)
	m.mu.Unlock()
	if !ok {
		return ErrUnknown
	}
	m.watchers.tell(id, Event{Ended: true})
	return nil
}

func (m *Memory) Watch(id string) (<-chan Event, func()) { return m.watchers.add(id) }

func (m *Memory) Send(_ context.Context, id string, msg *jsonrpc.Message) error {
	m.mu.Lock()
	receive := m.receive
	m.mu.Unlock()
	if receive != nil {
		receive(id, msg)
	}
	return nil
}

func (m *Memory) Receive(f func(string, *jsonrpc.Message)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.receive = f
}

func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
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
