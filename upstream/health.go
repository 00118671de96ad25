package upstream

import (
	"errors"
	"github.com/manifold-mcp/manifold/upstream/transport"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/oauth"
	"github.com/manifold-mcp/manifold/internal/outage"
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
// per failed request (internal/outage): one line when the upstream starts
// failing, at most one per summaryEvery while it goes on (with a count),
// one when it recovers. An outage at hundreds of requests a second costs a
// few lines, and so does a stdio child in a crash loop, whose exits are
// failures of the upstream like any other (stdio.go).
type health struct {
	now      func() time.Time
	onChange func(State) // told of each change of state, outside the lock
	episode  *outage.Summary

	mu        sync.Mutex
	state     State
	lastErr   string
	lastErrAt time.Time
	samples   [sampleRing]sample
	next      int
}

type sample struct {
	at  time.Time
	dur time.Duration
}

const (
	// summaryEvery spaces the lines of one failing episode.
	summaryEvery = outage.DefaultEvery
	// recoveredAfter is how long a success must follow the last failure
	// to end an episode: a flapping upstream is one episode, not a line
	// per flip.
	recoveredAfter = outage.DefaultSettle
	// sampleRing holds the latest calls, for quantiles and rate.
	sampleRing = 512
	window     = time.Minute
)

func newHealth(log *slog.Logger, onChange func(State)) *health {
	h := &health{now: time.Now, onChange: onChange}
	h.episode = &outage.Summary{Log: log, Subject: "upstream", Every: summaryEvery, Settle: recoveredAfter,
		Now: func() time.Time { return h.now() }}
	return h
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

// success records a contact that worked.
func (h *health) success() {
	h.mu.Lock()
	h.outcome(nil)
}

// Failure records a contact that failed: Down when the server could not be
// reached, otherwise only the error.
func (h *health) Failure(err error) {
	h.mu.Lock()
	h.outcome(err)
}

// Failing reports whether a failing episode is under way: what a
// transport then does again and again (restart a child, reopen a stream)
// is counted in its summary, not logged each time.
func (h *health) Failing() bool { return h.episode.Failing() }

// outcome records a contact's result; h.mu is held, and released before
// onChange is told of a change of state.
func (h *health) outcome(err error) {
	if errors.Is(err, transport.ErrChannelWait) {
		// The channel's opening reports its own failure, with its cause; a
		// call that gave up waiting for it would only name the wait, and
		// on a loaded machine be the episode's first line.
		h.mu.Unlock()
		return
	}
	if _, consent := oauth.IsConsent(err); consent {
		// The server answered, with the challenge of a caller who has not
		// consented yet: it is up, and that caller has to act, not it.
		err = nil
	} else if callerMustAct(err) {
		// Never sent (the token could not be had): nothing of the server.
		h.mu.Unlock()
		return
	}
	var changed bool
	st := Ready
	if err == nil {
		changed = h.set(Ready)
	} else {
		st = Down
		changed = Unreachable(err) && h.set(Down)
		h.lastErr, h.lastErrAt = err.Error(), h.now()
	}
	state := h.state.String()
	h.mu.Unlock()
	if err == nil {
		h.episode.Success()
	} else {
		h.episode.Failure(err, "state", state)
	}
	if changed {
		h.onChange(st)
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
