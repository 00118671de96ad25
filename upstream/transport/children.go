package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// Processes of their own, for a stdio server run per principal
// (Options.PerPrincipal with Command). On one process shared by every
// caller, a question of the server arrives on stdout naming no request: it
// can be put to a caller only while that caller's call is the only one in
// flight (calls), and is refused otherwise. A process per principal makes
// its stdout that principal's: its questions belong to its principal's
// calls alone. What the server keeps between calls is the principal's too.
//
// A child is started for the negotiation of a principal's own session, and
// own.go keeps that session by principal, as it keeps the sessions of a
// server reached with each caller's own credential: the child is found
// through its session's generation, unique among the upstream's children.
// A child ends when it has had no call for childIdle, when it is the least
// recently used child with no call in it and another principal needs one
// past maxChildren, when its session is replaced, and at Close. A child is
// never ended under a call: when every one of maxChildren has a call in
// flight, a principal that needs a new one is refused (errChildrenBusy)
// until one is free. A child that exits by itself ends its principal's
// session alone, and the principal's next call starts another; the exit is
// a failure of the upstream's, logged as a shared child's is.

// maxChildren bounds the processes of an upstream run per principal: as
// many principals as call, which callers control, and each a process.
// Sixteen idle servers of a common kind (a Node or Python MCP server, some
// tens of MB each) stay well under a gigabyte.
const maxChildren = 16

// childIdle is how long a child runs with no call before it is ended: a
// principal's working session keeps it, one that went away frees it.
const childIdle = 5 * time.Minute

// ErrChildrenBusy: every child has a call in flight, none can be ended for
// another principal's.
var ErrChildrenBusy = errors.New("every process of the upstream has a call in flight")

// errChildrenClosed: the upstream is closed.
var errChildrenClosed = errors.New("upstream is shut down")

// children are the processes of an upstream run per principal, by
// generation.
type children struct {
	c    *stdioConn
	max  int
	idle time.Duration

	mu      sync.Mutex
	gen     uint64
	live    map[uint64]*child
	closed  bool
	quit    chan struct{}
	swept   chan struct{} // closed when the idle sweep has returned
	running sync.WaitGroup
}

// child is one process, when it was last used and the calls in it now.
// A fresh one, whose negotiation has not ended yet, is not taken for
// another principal's.
type child struct {
	p      *process // nil while it starts
	used   time.Time
	calls  int
	fresh  bool
	ending bool
}

func newChildren(c *stdioConn, max int, idle time.Duration) *children {
	k := &children{c: c, max: max, idle: idle, live: map[uint64]*child{}, quit: make(chan struct{}), swept: make(chan struct{})}
	go k.sweep()
	return k
}

// open starts a child, making room for it first, and returns its
// generation.
func (k *children) open() (uint64, error) {
	gen, err := k.reserve()
	if err != nil {
		return 0, err
	}
	p, err := k.c.start(gen)
	if err != nil {
		k.mu.Lock()
		delete(k.live, gen)
		k.mu.Unlock()
		k.running.Done()
		k.c.health.Failure(fmt.Errorf("%w: %w", errNotStarted, err))
		return 0, err
	}
	k.mu.Lock()
	ch, closed := k.live[gen], k.closed
	ch.p, ch.used, ch.fresh, ch.ending = p, time.Now(), true, closed
	k.mu.Unlock()
	go k.reap(gen, p)
	if closed { // Close missed it while it started
		k.c.terminate(p)
		return 0, errChildrenClosed
	}
	return gen, nil
}

// reserve takes a place for a new child and returns its generation. When
// all are taken, the least recently used idle child gives up its place,
// and is ended before the new one starts: there are never more than max
// processes.
func (k *children) reserve() (uint64, error) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return 0, errChildrenClosed
	}
	var victim *process
	if len(k.live) >= k.max {
		gen, v := k.leastRecentlyUsed()
		if v == nil {
			k.mu.Unlock()
			return 0, fmt.Errorf("%w (%d, the most run per principal)", ErrChildrenBusy, k.max)
		}
		delete(k.live, gen) // its place is the new child's; reap knows it was ended
		victim = v.p
	}
	k.gen++
	gen := k.gen
	k.live[gen] = &child{used: time.Now()}
	k.running.Add(1)
	k.mu.Unlock()
	if victim != nil {
		k.c.terminate(victim)
	}
	return gen, nil
}

// leastRecentlyUsed is the child with no call in it used longest ago, if
// any. Called with mu held.
func (k *children) leastRecentlyUsed() (uint64, *child) {
	var lru *child
	var lruGen uint64
	for gen, ch := range k.live {
		if ch.p != nil && !ch.ending && !ch.fresh && ch.calls == 0 && (lru == nil || ch.used.Before(lru.used)) {
			lru, lruGen = ch, gen
		}
	}
	return lruGen, lru
}

// reap forgets the child of gen once its process has exited; an exit
// nobody asked for is a failure of the upstream's.
func (k *children) reap(gen uint64, p *process) {
	defer k.running.Done()
	<-p.exited
	k.mu.Lock()
	ch := k.live[gen]
	delete(k.live, gen)
	lost := ch != nil && !ch.ending && !k.closed
	k.mu.Unlock()
	if lost {
		k.c.health.Failure(p.exit)
	}
}

// hold returns the live process of gen with a call counted in it, and
// what ends the count; nil if there is none.
func (k *children) hold(gen uint64) (*process, func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := k.live[gen]
	if ch == nil || ch.p == nil || ch.ending {
		return nil, nil
	}
	ch.calls++
	ch.used = time.Now()
	return ch.p, func() {
		k.mu.Lock()
		ch.calls--
		ch.used = time.Now()
		ch.fresh = ch.fresh && ch.calls > 0 // its negotiation's calls are over
		k.mu.Unlock()
	}
}

// alive reports whether gen is a live child.
func (k *children) alive(gen uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := k.live[gen]
	return ch != nil && ch.p != nil && !ch.ending
}

// end ends the child of gen, if it is live, in the background.
func (k *children) end(gen uint64) {
	k.mu.Lock()
	ch := k.live[gen]
	if ch == nil || ch.p == nil || ch.ending {
		k.mu.Unlock()
		return
	}
	ch.ending = true
	k.mu.Unlock()
	go k.c.terminate(ch.p)
}

// sweep ends the children idle for k.idle, until Close.
func (k *children) sweep() {
	defer close(k.swept)
	t := time.NewTicker(max(k.idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-k.quit:
			return
		case <-t.C:
		}
		k.mu.Lock()
		var idle []uint64
		for gen, ch := range k.live {
			if ch.p != nil && !ch.ending && ch.calls == 0 && time.Since(ch.used) >= k.idle {
				idle = append(idle, gen)
			}
		}
		k.mu.Unlock()
		for _, gen := range idle {
			k.end(gen)
		}
	}
}

// close ends every child and waits for them until ctx ends; then their
// process groups are killed, and the wait goes on.
func (k *children) close(ctx context.Context) error {
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		close(k.quit)
	}
	var ps []*process
	for _, ch := range k.live {
		if ch.p != nil {
			ch.ending = true
			ps = append(ps, ch.p)
		}
	}
	k.mu.Unlock()
	for _, p := range ps {
		go k.c.terminate(p)
	}
	done := make(chan struct{})
	go func() {
		k.running.Wait()
		<-k.swept
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, p := range ps {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
		<-done
		return ctx.Err()
	}
}

// busy counts the processes with a call in flight past their negotiation.
func (k *children) busy() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, ch := range k.live {
		if ch.calls > 0 && !ch.fresh {
			n++
		}
	}
	return n
}
