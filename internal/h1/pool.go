package h1

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"
)

// get returns an idle connection to addr that is still open, or a new one.
func (t *Transport) get(ctx context.Context, addr string) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	for {
		c := t.takeIdle(addr)
		if c == nil {
			break
		}
		if open(c.nc) { // pooled with nothing buffered (body.finish)
			c.reused = true
			return c, nil
		}
		c.nc.Close()
	}
	dial := t.Dial
	if dial == nil {
		dial = defaultDialer.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("h1: dial %s: %w", addr, err)
	}
	c := &conn{nc: nc, addr: addr, lr: headerLimit{nc: nc, left: -1}}
	c.br = bufio.NewReaderSize(&c.lr, 16<<10)
	c.bw = bufio.NewWriterSize(sentCounter{c}, 16<<10)
	return c, nil
}

var defaultDialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// takeIdle pops addr's most recently used idle connection (the sweep
// closes those idle too long). A request wants connections kept again
// after CloseIdleConnections.
func (t *Transport) takeIdle(addr string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closing = false
	list := t.idle[addr]
	if len(list) == 0 {
		return nil
	}
	c := list[len(list)-1]
	list[len(list)-1] = nil
	if list = list[:len(list)-1]; len(list) == 0 {
		delete(t.idle, addr)
	} else {
		t.idle[addr] = list
	}
	return c
}

// put keeps c for reuse: at most MaxIdle per host, the oldest closed
// first, each closed by the sweep once idle for IdleTimeout. After
// CloseIdleConnections, until the next request, c is closed instead.
func (t *Transport) put(c *conn) {
	now := time.Now()
	c.since = now
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		c.nc.Close()
		return
	}
	if t.idle == nil {
		t.idle = make(map[string][]*conn)
	}
	list := t.idle[c.addr]
	list = closeFirst(list, len(list)+1-t.maxIdle())
	t.idle[c.addr] = append(list, c)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTimeout(), t.sweepIdle)
	}
}

// sweepIdle closes the connections idle for IdleTimeout, and comes back
// when the next of the others is due.
func (t *Transport) sweepIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	var next time.Time
	for addr, list := range t.idle {
		expired := 0
		for expired < len(list) && now.Sub(list[expired].since) >= t.idleTimeout() {
			expired++
		}
		if list = closeFirst(list, expired); len(list) == 0 {
			delete(t.idle, addr)
			continue
		}
		t.idle[addr] = list
		if due := list[0].since.Add(t.idleTimeout()); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	if next.IsZero() {
		t.sweep = nil
		return
	}
	t.sweep = time.AfterFunc(next.Sub(now), t.sweepIdle)
}

// closeFirst closes the first n of list, the longest idle, and returns the
// rest.
func closeFirst(list []*conn, n int) []*conn {
	n = max(0, min(n, len(list)))
	for i := range n {
		list[i].nc.Close()
		list[i] = nil
	}
	return list[n:]
}

// CloseIdleConnections closes every idle connection, and those in use when
// their bodies are done with, until the next request (http.Client calls
// this; Manifold does when it lets an upstream go).
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.closing = nil, true
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.nc.Close()
		}
	}
	if f, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

func (t *Transport) maxIdle() int {
	if t.MaxIdle > 0 {
		return t.MaxIdle
	}
	return 64
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return 90 * time.Second
}
