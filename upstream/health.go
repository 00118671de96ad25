package upstream

import (
	"log/slog"
	"slices"
	"sync"
	"time"
)

// State is an upstream's condition as Manifold last saw it.
type State int

const (
	// Connecting: not yet reached since start (or since a reload).
	Connecting State = iota
	// Ready: the last contact worked (an error answer is still an answer).
	Ready
	// Down: the last contact failed to reach the server (see Unreachable).
	Down
)

func (s State) String() string {
	return [...]string{"connecting", "ready", "down"}[s]
}

// Status is a snapshot of an upstream's health, for readiness, metrics and
// the admin page.
type Status struct {
	State     State
	Protocol  string // the negotiated revision, "" before the first
	Transport string // "http" or "stdio"
	LastError string
	LastErrAt time.Time
	// P50, P99 and PerSecond describe the calls of the last minute.
	P50, P99  time.Duration
	PerSecond float64
}

// health follows one upstream's outcomes. Its log is a summary, not a line
// per failed request: one line when the upstream starts failing, at most
// one per summaryEvery while it goes on (with a count), one when it
// recovers. An outage at hundreds of requests a second costs a few lines.
type health struct {
	log      *slog.Logger
	now      func() time.Time
	onChange func(State) // told of each change of state, outside the lock

	mu        sync.Mutex
	state     State
	lastErr   string
	lastErrAt time.Time
	// The failing episode: when it began, failures since, when the last
	// summary was written and the last failure seen.
	failing     bool
	settling    bool // a check for the episode's end is scheduled
	since       time.Time
	failures    int
	reportedAt  time.Time
	lastFailure time.Time
	samples     [sampleRing]sample
	next        int
}

type sample struct {
	at  time.Time
	dur time.Duration
}

const (
	// summaryEvery spaces the lines of one failing episode.
	summaryEvery = 10 * time.Second
	// recoveredAfter is how long a success must follow the last failure
	// to end an episode: a flapping upstream is one episode, not a line
	// per flip.
	recoveredAfter = time.Second
	// sampleRing holds the latest calls, for quantiles and rate.
	sampleRing = 512
	window     = time.Minute
)

func newHealth(log *slog.Logger, onChange func(State)) *health {
	return &health{log: log, now: time.Now, onChange: onChange}
}

// set moves to state s, and reports whether that is a change; h.mu is held.
func (h *health) set(s State) bool {
	changed := h.state != s
	h.state = s
	return changed && h.onChange != nil
}

// observe records a call that took d; err is nil when the server answered.
func (h *health) observe(d time.Duration, err error) {
	h.mu.Lock()
	h.samples[h.next%sampleRing] = sample{at: h.now(), dur: d}
	h.next++
	h.outcome(err)
}

// success records a contact that worked. An episode ends once a success
// has followed the last failure by recoveredAfter: at once if it has, or
// when a check scheduled for then finds no failure since.
func (h *health) success() {
	h.mu.Lock()
	h.outcome(nil)
}

// failure records a contact that failed: Down when the server could not be
// reached, otherwise only the error.
func (h *health) failure(err error) {
	h.mu.Lock()
	h.outcome(err)
}

// outcome records a contact's result; h.mu is held, and released before
// onChange is told of a change of state.
func (h *health) outcome(err error) {
	var changed bool
	st := Ready
	if err == nil {
		changed = h.set(Ready)
		h.settle()
	} else {
		st = Down
		changed = Unreachable(err) && h.set(Down)
		h.record(err)
	}
	h.mu.Unlock()
	if changed {
		h.onChange(st)
	}
}

// settle ends the failing episode if it is over, or checks again later;
// h.mu is held.
func (h *health) settle() {
	if !h.failing || h.state != Ready {
		return
	}
	now := h.now()
	if now.Sub(h.lastFailure) >= recoveredAfter {
		h.failing = false
		h.log.Info("upstream recovered", "after", now.Sub(h.since).Round(time.Millisecond), "failures", h.failures)
		return
	}
	if !h.settling {
		h.settling = true
		time.AfterFunc(recoveredAfter, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.settling = false
			h.settle()
		})
	}
}

// record notes a failure and logs the episode's summary; h.mu is held.
func (h *health) record(err error) {
	now := h.now()
	h.lastErr, h.lastErrAt, h.lastFailure = err.Error(), now, now
	if !h.failing {
		h.failing, h.since, h.failures, h.reportedAt = true, now, 1, now
		h.log.Warn("upstream failing", "state", h.state.String(), "err", err)
		return
	}
	h.failures++
	if now.Sub(h.reportedAt) >= summaryEvery {
		h.reportedAt = now
		h.log.Warn("upstream still failing", "state", h.state.String(), "failures", h.failures, "for", now.Sub(h.since).Round(time.Second), "lastErr", err)
	}
}

// current returns the state alone, for readiness and metrics.
func (h *health) current() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// status returns the snapshot, with the quantiles of the last minute. The
// samples are copied under the lock and sorted after it: calls record
// theirs meanwhile.
func (h *health) status() Status {
	h.mu.Lock()
	st := Status{State: h.state, LastError: h.lastErr, LastErrAt: h.lastErrAt}
	now := h.now()
	durs := make([]time.Duration, 0, sampleRing)
	oldest := now
	for _, s := range h.samples {
		if !s.at.IsZero() && now.Sub(s.at) <= window {
			durs = append(durs, s.dur)
			if s.at.Before(oldest) {
				oldest = s.at
			}
		}
	}
	h.mu.Unlock()
	if len(durs) == 0 {
		return st
	}
	slices.Sort(durs)
	st.P50 = durs[len(durs)*50/100]
	st.P99 = durs[min(len(durs)-1, len(durs)*99/100)]
	// Over the time the samples cover: a full ring may cover less than
	// the window.
	st.PerSecond = float64(len(durs)) / max(now.Sub(oldest), time.Second).Seconds()
	return st
}
