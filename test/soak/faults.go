package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// The faults of -faults, injected in turn every interval: an upstream
// killed and started again, Redis stopped and later killed, a replica's
// stdio child killed, a reload that replaces an upstream. After each, every
// replica must be ready again, with every upstream, within recoverWithin;
// one that is not is wrong.
var faultKinds = []string{"upstream", "redis-stop", "stdio", "reload", "redis-kill"}

const (
	faultDown     = 3 * time.Second // how long a killed component stays down
	recoverWithin = 60 * time.Second
	faultGrace    = 10 * time.Second // errors are expected this long after recovery
)

// injectFaults injects one fault each interval until ctx ends.
func (l *load) injectFaults(ctx context.Context, every time.Duration) {
	var window atomic.Int64 // the latest fault's number, for its grace period
	timer := time.NewTimer(every / 2)
	defer timer.Stop()
	for n := int64(1); ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		kind := faultKinds[(n-1)%int64(len(faultKinds))]
		fmt.Fprintf(os.Stderr, "soak: fault %d: %s\n", n, kind)
		l.faulting.Store(true)
		window.Store(n)
		if err := l.inject(kind, int(n)); err != nil {
			l.t.record("fault "+kind, wrongf("could not inject: %v", err))
		}
		if err := l.c.waitReady(recoverWithin); err != nil {
			l.t.record("recovery after "+kind, wrongf("%v", err))
		}
		time.AfterFunc(faultGrace, func() {
			if window.Load() == n {
				l.faulting.Store(false)
			}
		})
		timer.Reset(every)
	}
}

func (l *load) inject(kind string, n int) error {
	c := l.c
	switch kind {
	case "upstream":
		c.upstreams["modern"].kill()
		time.Sleep(faultDown)
		return c.upstreams["modern"].start()
	case "redis-stop", "redis-kill":
		if kind == "redis-stop" {
			c.redis.stop()
		} else {
			c.redis.kill()
		}
		time.Sleep(faultDown)
		return c.redis.start()
	case "stdio":
		r := c.replicas[n%len(c.replicas)]
		kids := children(r.proc.pid())
		if len(kids) == 0 {
			return fmt.Errorf("replica %d has no stdio child", r.index)
		}
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return nil
	case "reload":
		return c.reload()
	}
	return fmt.Errorf("unknown fault %q", kind)
}

// reload changes every replica's configuration (the legacy upstream's
// timeout, so that it is replaced) and asks each to reload.
func (c *cluster) reload() error {
	c.reloads++
	for _, r := range c.replicas {
		if err := os.WriteFile(r.config, []byte(c.configOf(r)), 0o600); err != nil {
			return err
		}
		resp, err := http.Post(r.admin+"/reload", "text/plain", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("replica %d refused the reload: HTTP %d", r.index, resp.StatusCode)
		}
	}
	return nil
}
