package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Restart backoff for a channel that ends (a stdio server that exits, an
// HTTP+SSE stream that drops): exponential from restartMin, capped at
// restartMax, with full jitter; a channel that lasted restartReset counts as
// healthy and resets it.
const (
	restartMin   = 100 * time.Millisecond
	restartMax   = 30 * time.Second
	restartReset = 30 * time.Second
)

// supervisor keeps one channel of a transport open at a time (a stdio
// child, an HTTP+SSE stream): it opens one, serves calls on it until it
// ends, and opens the next after a backoff, each a new generation, so that
// a session negotiated on a channel that ended is known to be gone. A
// transport supplies how to open a channel, when one has ended and how to
// stop one; waiting for the channel, failing fast while it is down, and
// stopping all are the supervisor's, written once for every transport.
type supervisor[C any] struct {
	open  func(gen uint64) (C, error)
	ended func(C) <-chan struct{} // closed once the channel ended and its calls failed
	stop  func(C)                 // ends the channel; returns once it has ended
	// failed and lost are told of a channel that would not open, and of one
	// that ended while the supervisor was not stopped, for the log.
	failed func(gen uint64, err error)
	lost   func(c C, lasted time.Duration)
	// down is the error of a call made while the channel is down, waiting
	// out its backoff.
	down error

	mu         sync.Mutex
	cur        C
	live       bool          // cur is a channel
	gen        uint64        // cur's generation
	up         chan struct{} // closed when a channel opens, or when one would not; then replaced
	restarting bool          // no channel: the next waits out its backoff
	stopped    bool
	quit       chan struct{}
	done       chan struct{} // closed when run has returned
}

func (s *supervisor[C]) start() {
	s.up, s.quit, s.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go s.run()
}

// run opens channel after channel until stopped.
func (s *supervisor[C]) run() {
	defer close(s.done)
	var gen uint64
	delay := restartMin
	for {
		gen++
		opened := time.Now()
		c, err := s.open(gen)
		if err != nil {
			s.failed(gen, err)
			s.set(c, 0, false)
		} else if s.serve(c, gen, opened) {
			return
		}
		if time.Since(opened) > restartReset {
			delay = restartMin
		}
		wait := rand.N(delay) + delay/2 // jitter around the current delay
		delay = min(delay*2, restartMax)
		select {
		case <-time.After(wait):
		case <-s.quit:
			return
		}
	}
}

// serve makes c current until it ends, and reports whether the supervisor
// is stopped.
func (s *supervisor[C]) serve(c C, gen uint64, opened time.Time) (stopped bool) {
	s.set(c, gen, true)
	select {
	case <-s.ended(c):
	case <-s.quit:
		s.stop(c)
	}
	var none C
	s.set(none, 0, false)
	s.mu.Lock()
	stopped = s.stopped
	s.mu.Unlock()
	if !stopped {
		s.lost(c, time.Since(opened))
	}
	return stopped
}

// set makes c current (open) or records that there is none, waking the
// callers waiting for a channel either way: without one, they fail fast.
func (s *supervisor[C]) set(c C, gen uint64, open bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur, s.gen, s.live, s.restarting = c, gen, open, !open
	close(s.up)
	s.up = make(chan struct{})
}

// current returns the open channel, if there is one.
func (s *supervisor[C]) current() (C, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.live
}

// ready waits until a channel is open and returns its generation; while
// the channel is down between two, it fails at once with s.down.
// A caller whose context ends first gets errChannelWait.
func (s *supervisor[C]) ready(ctx context.Context) (uint64, error) {
	for {
		s.mu.Lock()
		gen, open, up, stopped, restarting := s.gen, s.live, s.up, s.stopped, s.restarting
		s.mu.Unlock()
		switch {
		case stopped:
			return 0, errors.New("upstream is shut down")
		case open:
			return gen, nil
		case restarting:
			return 0, s.down
		}
		select {
		case <-up:
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %w", ErrChannelWait, ctx.Err())
		}
	}
}

// ErrChannelWait is a call that gave up waiting for a channel still being
// opened.
var ErrChannelWait = errors.New("waiting for the upstream's channel")

// alive reports whether gen is the open channel's generation.
func (s *supervisor[C]) alive(gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live && s.gen == gen
}

// close stops the supervisor, which stops the open channel, and waits for
// it until ctx ends; then hurry, if set, is called with the channel still
// open (to end it harder), and the wait goes on (without hurry, it does
// not).
func (s *supervisor[C]) close(ctx context.Context, hurry func(C)) error {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.quit)
	}
	c, open := s.cur, s.live
	s.mu.Unlock()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		if hurry == nil {
			return ctx.Err()
		}
		if open {
			hurry(c)
		}
		<-s.done
		return ctx.Err()
	}
}
