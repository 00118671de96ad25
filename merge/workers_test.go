package merge

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// More fetches at once than there are workers all run, at once: the ones
// past maxWorkers get goroutines of their own instead of waiting, and no
// more than maxWorkers workers are ever started; once idle, the workers
// take the next fetches.
func TestWorkersRunEveryFetchAtOnce(t *testing.T) {
	w := &workers{jobs: make(chan func())}
	const n = 3 * maxWorkers
	release := make(chan struct{})
	var running, done sync.WaitGroup
	running.Add(n)
	done.Add(n)
	for range n {
		w.run(func() {
			running.Done()
			<-release // every fetch waits for all n to be running
			done.Done()
		})
	}
	running.Wait()
	close(release)
	done.Wait()
	if w.started != maxWorkers {
		t.Fatalf("%d workers started for %d fetches at once, want %d", w.started, n, maxWorkers)
	}
	var again sync.WaitGroup
	again.Add(n)
	for range n {
		w.run(again.Done)
	}
	again.Wait()
	if w.started != maxWorkers {
		t.Fatalf("%d workers after they went idle, want %d", w.started, maxWorkers)
	}
}

// Workers left idle end: a Merger that stopped listing (a stopped
// process's) keeps no goroutine.
func TestIdleWorkersEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // workerIdle passes in the bubble's time
		w := &workers{jobs: make(chan func())}
		var done sync.WaitGroup
		done.Add(8)
		for range 8 {
			w.run(done.Done)
		}
		done.Wait()
		time.Sleep(workerIdle)
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.started != 0 {
			t.Fatalf("%d idle workers still running", w.started)
		}
	})
}
