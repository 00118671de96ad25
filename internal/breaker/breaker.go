// Package breaker is a circuit breaker for a dependency that is optional,
// like a shared cache: after a run of consecutive failures it opens and
// callers skip the dependency entirely for a cooldown; then one caller probes
// (half-open), and its outcome closes the breaker or opens it again.
//
// Skipping a slow or dead dependency quickly is the point: with the breaker
// open, a request costs what it would cost without the dependency, instead of
// a timeout each time.
package breaker

import (
	"sync"
	"time"
)

// Breaker is safe for concurrent use.
type Breaker struct {
	threshold int
	cooldown  time.Duration
	onChange  func(open bool)
	now       func() time.Time

	mu        sync.Mutex
	failures  int
	open      bool
	openUntil time.Time
	probing   bool
}

// New returns a closed breaker that opens after threshold consecutive
// failures, for cooldown. onChange, if set, is called on every transition
// between closed and open (not on each half-open probe), outside the lock.
func New(threshold int, cooldown time.Duration, onChange func(open bool)) *Breaker {
	return &Breaker{threshold: threshold, cooldown: cooldown, onChange: onChange, now: time.Now}
}

// Allow reports whether the caller may use the dependency now. A caller
// allowed while the breaker is open is its probe and must report Success or
// Failure.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true
	}
	if b.probing || b.now().Before(b.openUntil) {
		return false
	}
	b.probing = true
	return true
}

// Success records a call that worked.
func (b *Breaker) Success() {
	b.mu.Lock()
	wasOpen := b.open
	b.failures, b.open, b.probing = 0, false, false
	b.mu.Unlock()
	if wasOpen && b.onChange != nil {
		b.onChange(false)
	}
}

// Failure records a call that failed.
func (b *Breaker) Failure() {
	b.mu.Lock()
	b.failures++
	opened := false
	if b.open {
		b.probing = false
		b.openUntil = b.now().Add(b.cooldown)
	} else if b.failures >= b.threshold {
		b.open, opened = true, true
		b.openUntil = b.now().Add(b.cooldown)
	}
	b.mu.Unlock()
	if opened && b.onChange != nil {
		b.onChange(true)
	}
}

// Abandon records a call that ended without telling anything about the
// dependency (its caller gave up): a probe it was is released for another
// caller; nothing else changes.
func (b *Breaker) Abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// Open reports whether the breaker is open (or half-open).
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}
