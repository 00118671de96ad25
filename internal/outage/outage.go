// Package outage writes a thing's failing episodes to the log as a summary,
// not a line per failure: one line when it starts failing, at most one per
// interval while it goes on (with the count of failures and the latest),
// and one when it recovers. An upstream's outage at hundreds of calls a
// second, a stdio child in a crash loop and a trace collector that is down
// each cost a few lines, however many failures they are.
//
// An episode ends once a success has followed the last failure by a settle
// time, so that a thing that flaps, failing and working in turn, is one
// episode rather than a pair of lines per flip. A success with nothing
// after it still ends the episode: a check is scheduled for when the
// settle time has passed.
package outage

import (
	"log/slog"
	"sync"
	"time"
)

// Defaults of Summary's intervals.
const (
	DefaultEvery  = 10 * time.Second
	DefaultSettle = time.Second
)

// Summary follows one thing's outcomes and logs its episodes. The zero
// value is not usable: set Log and Subject. It is safe for concurrent use.
type Summary struct {
	Log *slog.Logger
	// Subject starts every line: "upstream" logs "upstream failing",
	// "upstream still failing" and "upstream recovered".
	Subject string
	// Every spaces the lines of one episode (DefaultEvery when 0); Settle
	// is how long a success must follow the last failure to end it
	// (DefaultSettle when 0).
	Every, Settle time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu          sync.Mutex
	failing     bool
	settling    bool // a check for the episode's end is scheduled
	lastOK      bool // the latest outcome was a success
	since       time.Time
	failures    int
	reportedAt  time.Time
	lastFailure time.Time
}

func (s *Summary) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Failure records a failure: the first of an episode is logged with err
// and attrs, the others are counted and summarized once per Every.
func (s *Summary) Failure(err error, attrs ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.lastFailure, s.lastOK = now, false
	if !s.failing {
		s.failing, s.since, s.failures, s.reportedAt = true, now, 1, now
		s.Log.Warn(s.Subject+" failing", append(attrs, "err", err)...)
		return
	}
	s.failures++
	if now.Sub(s.reportedAt) >= orDefault(s.Every, DefaultEvery) {
		s.reportedAt = now
		s.Log.Warn(s.Subject+" still failing", append(attrs, "failures", s.failures, "for", now.Sub(s.since).Round(time.Second), "lastErr", err)...)
	}
}

// Success records a success, which ends the episode once it has held for
// Settle.
func (s *Summary) Success() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastOK = true
	s.settle()
}

// Failing reports whether an episode is under way.
func (s *Summary) Failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

// settle ends the episode if it is over, or checks again when it may be;
// s.mu is held.
func (s *Summary) settle() {
	if !s.failing || !s.lastOK {
		return
	}
	now := s.now()
	settle := orDefault(s.Settle, DefaultSettle)
	if now.Sub(s.lastFailure) >= settle {
		s.failing = false
		s.Log.Info(s.Subject+" recovered", "after", now.Sub(s.since).Round(time.Millisecond), "failures", s.failures)
		return
	}
	if !s.settling {
		s.settling = true
		time.AfterFunc(settle, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.settling = false
			s.settle()
		})
	}
}
