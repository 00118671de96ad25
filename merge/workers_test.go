package merge

import (
	"sync"
	"testing"
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
	w := &workers{jobs: make(chan func()), idle: 10 * time.Millisecond}
	var done sync.WaitGroup
	done.Add(8)
	for range 8 {
		w.run(done.Done)
	}
	done.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		w.mu.Lock()
		n := w.started
		w.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers still running", n)
		}
	}
}
