package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is one replica's figures at one time.
type sample struct {
	rss        float64 // MiB
	goroutines int
	fds        int
}

// measure reads a replica's RSS and open fds from /proc and its
// goroutines from its /metrics.
func measure(r *replica) (sample, error) {
	pid := r.proc.pid()
	if pid == 0 {
		return sample{}, fmt.Errorf("replica %d is not running", r.index)
	}
	g, err := goroutines(r.admin + "/metrics")
	if err != nil {
		return sample{}, err
	}
	return sample{rss: rssMiB(pid), goroutines: g, fds: openFDs(pid)}, nil
}

func goroutines(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("%s has no go_goroutines", url)
}

// recorder writes every sample to a CSV file, for a plot of each
// replica's RSS, goroutines and fds over the run.
type recorder struct {
	mu    sync.Mutex
	f     *os.File
	w     *csv.Writer
	began time.Time
	t     *tally
}

func newRecorder(path string, t *tally) (*recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := csv.NewWriter(f)
	err = w.Write([]string{"elapsed_s", "phase", "replica", "rss_mib", "goroutines", "fds", "requests", "errors", "wrong"})
	return &recorder{f: f, w: w, began: time.Now(), t: t}, err
}

func (rec *recorder) write(phase string, r *replica, s sample) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	_ = rec.w.Write([]string{strconv.FormatFloat(time.Since(rec.began).Seconds(), 'f', 1, 64), phase, strconv.Itoa(r.index),
		strconv.FormatFloat(s.rss, 'f', 1, 64), strconv.Itoa(s.goroutines), strconv.Itoa(s.fds),
		strconv.FormatInt(rec.t.requests.Load(), 10), strconv.FormatInt(rec.t.errors.Load(), 10), strconv.FormatInt(rec.t.wrong.Load(), 10)})
	rec.w.Flush()
}

func (rec *recorder) close() error {
	rec.w.Flush()
	return rec.f.Close()
}

// sampleEvery records every replica each interval until ctx ends.
func (rec *recorder) sampleEvery(ctx context.Context, c *cluster, phase string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, r := range c.replicas {
			if s, err := measure(r); err == nil {
				rec.write(phase, r, s)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// settled measures a replica at rest: the least of each figure over a few
// samples a second apart (what is in flight is not what is held).
func settled(r *replica, n int) (sample, error) {
	var best sample
	for i := range n {
		s, err := measure(r)
		if err != nil {
			return s, err
		}
		if i == 0 {
			best = s
		}
		best.rss, best.goroutines, best.fds = min(best.rss, s.rss), min(best.goroutines, s.goroutines), min(best.fds, s.fds)
		time.Sleep(time.Second)
	}
	return best, nil
}
