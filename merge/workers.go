package merge

import (
	"sync"
	"time"
)

// workers run the page fetches of listings on goroutines that outlive one
// listing. A fetch runs deep (the cache, the upstream's HTTP client), and a
// goroutine started for it grows its stack from the minimum on every page,
// copying it each time: about a tenth of Manifold's CPU in a 16-upstream
// fan-out went to that (runtime.copystack). A worker's stack stays grown
// between fetches (until the garbage collector shrinks an idle one). At
// most maxWorkers wait; a fetch that finds none idle gets a goroutine of
// its own, so a listing never waits for another's. A worker left idle for
// workerIdle ends, so a Merger no longer listing (a stopped process's)
// keeps none.
type workers struct {
	jobs    chan func()
	idle    time.Duration // workerIdle when zero
	mu      sync.Mutex
	started int
}

const maxWorkers = 64

// workerIdle is how long an idle worker waits for a fetch before it ends.
const workerIdle = 10 * time.Second

// run runs f on an idle worker, a new one while there are fewer than
// maxWorkers, or a goroutine of its own.
func (w *workers) run(f func()) {
	select {
	case w.jobs <- f:
		return
	default:
	}
	w.mu.Lock()
	spawn := w.started < maxWorkers
	if spawn {
		w.started++
	}
	w.mu.Unlock()
	if !spawn {
		go f()
		return
	}
	go w.work(f)
}

// work runs f, then whatever run hands it, until none comes for
// workerIdle.
func (w *workers) work(f func()) {
	wait := w.idle
	if wait == 0 {
		wait = workerIdle
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for f != nil {
		f()
		idle.Reset(wait)
		select {
		case f = <-w.jobs:
		case <-idle.C:
			f = nil
		}
	}
	w.mu.Lock()
	w.started--
	w.mu.Unlock()
}
