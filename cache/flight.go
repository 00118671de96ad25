package cache

import (
	"context"
	"sync"

	"github.com/manifold-mcp/manifold/internal/panics"
)

// flight collapses concurrent misses for the same key into one fill, like
// singleflight, with one difference a proxy needs: the fill runs on its own
// context, detached from whichever caller started it, and is cancelled only
// when every caller waiting for it has gone. One impatient client cannot
// fail a fill that others still wait for, and a fill nobody wants any more
// stops reaching the upstream.
type flight struct {
	mu    sync.Mutex
	calls map[string]*call
}

type call struct {
	done    chan struct{}
	val     outcome
	waiters int
	cancel  context.CancelFunc
}

// outcome is what a fill produced, for every waiter to judge for itself.
type outcome struct {
	result   []byte     // the result as the upstream answered it, for the caller that filled
	reusable []byte     // the same without request-scoped _meta, for callers that joined the fill
	scope    string     // its normalised scope ("" when not cacheable)
	fp       string     // the credential fingerprint of the caller it was filled for
	solo     bool       // the answer is the filling request's own: joiners must not take it
	shared   *lazyShare // makes reusable when a joiner needs it (an answer too large to store)
	err      error
}

// contained is fn's outcome, a panic in it (a fill runs on a goroutine of
// its own) being the outcome's error: every waiter gets it, and the
// process goes on.
func contained(ctx context.Context, fn func(context.Context) outcome) (o outcome) {
	var err error
	defer func() {
		if err != nil {
			o = outcome{err: err}
		}
	}()
	defer panics.Recover(&err) // runs first
	return fn(ctx)
}

// do returns the outcome of fn for key, calling fn at most once at a time per
// key. joined reports that the outcome came from another caller's call.
func (g *flight) do(ctx context.Context, key string, fn func(context.Context) outcome) (o outcome, joined bool, err error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*call{}
	}
	c, ok := g.calls[key]
	if ok {
		c.waiters++
	} else {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &call{done: make(chan struct{}), waiters: 1, cancel: cancel}
		g.calls[key] = c
		go func() {
			c.val = contained(fctx, fn)
			g.mu.Lock()
			if g.calls[key] == c {
				delete(g.calls, key)
			}
			g.mu.Unlock()
			close(c.done)
			cancel()
		}()
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.val, ok, nil
	case <-ctx.Done():
		g.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			c.cancel()
			if g.calls[key] == c {
				delete(g.calls, key)
			}
		}
		g.mu.Unlock()
		return outcome{}, ok, ctx.Err()
	}
}
