package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// result is what a soak measured of its replicas at rest: after the
// warm-up, and at the end.
type result struct {
	start, end []sample
	leaks      int
}

// soak runs the warm-up, measures the replicas at rest, runs the load (and
// the faults), and measures them at rest again.
func soak(ctx context.Context, o options, c *cluster, t *tally, rec *recorder) (*result, error) {
	warm := min(max(o.duration/6, 5*time.Second), 5*time.Minute)
	l := &load{c: c, t: t}
	phase(ctx, "warm-up", warm, rec, c, o.sample, func(ctx context.Context) { l.run(ctx, o.workers, o.listeners, o.rate) })
	res := &result{}
	for _, r := range c.replicas {
		s, err := settled(r, 3)
		if err != nil {
			return nil, err
		}
		res.start = append(res.start, s)
		rec.write("rest", r, s)
	}
	phase(ctx, "load", o.duration-warm, rec, c, o.sample, func(ctx context.Context) {
		var wg sync.WaitGroup
		if o.faults {
			wg.Go(func() { l.injectFaults(ctx, o.faultEvery) })
		}
		l.run(ctx, o.workers, o.listeners, o.rate)
		wg.Wait()
	})
	if ctx.Err() != nil {
		return nil, fmt.Errorf("stopped before the end: %w", ctx.Err())
	}
	if err := c.waitReady(recoverWithin); err != nil {
		t.record("the end", wrongf("%v", err))
	}
	for i, r := range c.replicas {
		s, err := res.atRest(r, res.start[i])
		if err != nil {
			return nil, err
		}
		res.end = append(res.end, s)
		rec.write("rest", r, s)
	}
	return res, nil
}

// phase runs work for d, sampling every replica meanwhile.
func phase(ctx context.Context, name string, d time.Duration, rec *recorder, c *cluster, every time.Duration, work func(context.Context)) {
	fmt.Fprintf(os.Stderr, "soak: %s, %v\n", name, d.Round(time.Second))
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { rec.sampleEvery(pctx, c, name, every) })
	work(pctx)
	wg.Wait()
}

// The bounds of growth between the two measures at rest, past which a
// figure is a leak. They are loose: a short run measures little, and the
// samples of a long one are what shows a slow leak, on a plot.
func goroutineBound(start int) int   { return start + 20 + start/10 }
func fdBound(start int) int          { return start + 20 + start/10 }
func rssBound(start float64) float64 { return start*1.5 + 64 }

// atRest measures r once what was in flight has ended: it waits, up to
// 30 s, for goroutines and fds to come back within their bounds, and
// counts a leak for each figure that does not.
func (res *result) atRest(r *replica, start sample) (sample, error) {
	var s sample
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if s, err = settled(r, 2); err != nil {
			return s, err
		}
		within := s.goroutines <= goroutineBound(start.goroutines) && s.fds <= fdBound(start.fds)
		if within || time.Now().After(deadline) {
			break
		}
	}
	for _, f := range []struct {
		name       string
		start, end float64
		bound      float64
	}{
		{"goroutines", float64(start.goroutines), float64(s.goroutines), float64(goroutineBound(start.goroutines))},
		{"fds", float64(start.fds), float64(s.fds), float64(fdBound(start.fds))},
		{"rss_mib", start.rss, s.rss, rssBound(start.rss)},
	} {
		if f.end > f.bound {
			res.leaks++
			fmt.Fprintf(os.Stderr, "soak: LEAK replica %d %s: %.1f at rest after the warm-up, %.1f at the end (bound %.1f)\n", r.index, f.name, f.start, f.end, f.bound)
		}
	}
	return s, nil
}

// line is the summary, the figures summed over the replicas.
func (res *result) line(t *tally) string {
	var a, b sample
	for i := range res.start {
		a.rss, a.goroutines, a.fds = a.rss+res.start[i].rss, a.goroutines+res.start[i].goroutines, a.fds+res.start[i].fds
		b.rss, b.goroutines, b.fds = b.rss+res.end[i].rss, b.goroutines+res.end[i].goroutines, b.fds+res.end[i].fds
	}
	return fmt.Sprintf("soak: requests=%d errors=%d wrong=%d leaks=%d rss_start_mib=%.1f rss_end_mib=%.1f goroutines_start=%d goroutines_end=%d fds_start=%d fds_end=%d",
		t.requests.Load(), t.errors.Load(), t.wrong.Load(), res.leaks, a.rss, b.rss, a.goroutines, b.goroutines, a.fds, b.fds)
}
