package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tally counts a soak's outcomes, and shows the first few failures of each
// kind on stderr.
type tally struct {
	requests, errors, wrong atomic.Int64
	mu                      sync.Mutex
	shown                   map[bool]int
}

const showFirst = 10

func (t *tally) record(op string, err error) {
	if err == nil {
		return
	}
	wrong := isWrong(err)
	if wrong {
		t.wrong.Add(1)
	} else {
		t.errors.Add(1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shown == nil {
		t.shown = map[bool]int{}
	}
	if t.shown[wrong]++; t.shown[wrong] <= showFirst {
		kind := "error"
		if wrong {
			kind = "WRONG"
		}
		fmt.Fprintf(os.Stderr, "soak: %s %s: %v\n", kind, op, err)
	}
}

// load drives a cluster: bounded workers at a bounded rate, and listen
// streams, until its context ends.
type load struct {
	c        *cluster
	t        *tally
	faulting atomic.Bool // a fault is under way: errors expected, silences excused
}

type op struct {
	name   string
	weight int
	run    func(l *load, ctx context.Context, r *replica, token string) error
}

var ops = []op{
	{"read", 40, (*load).readPublic},
	{"read-private", 15, (*load).readPrivate},
	{"tool", 15, (*load).callTool},
	{"prompt", 10, (*load).getPrompt},
	{"list", 5, (*load).listAll},
	{"legacy-session", 15, (*load).legacySession},
}

func pick() op {
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := rand.IntN(total)
	for _, o := range ops {
		if n -= o.weight; n < 0 {
			return o
		}
	}
	return ops[0]
}

// run drives the load for as long as ctx lasts, at most rate operations a
// second from workers goroutines, plus listeners streams per replica.
func (l *load) run(ctx context.Context, workers, listeners int, rate float64) {
	var wg sync.WaitGroup
	tokens := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				close(tokens)
				return
			case <-t.C:
				select {
				case tokens <- struct{}{}:
				case <-ctx.Done():
				}
			}
		}
	})
	for range workers {
		wg.Go(func() {
			for range tokens {
				o, r, tok := pick(), l.c.replicas[rand.IntN(len(l.c.replicas))], l.c.tokens[rand.IntN(len(l.c.tokens))]
				if err := o.run(l, ctx, r, tok); ctx.Err() == nil {
					l.t.record(o.name, err)
				}
			}
		})
	}
	for _, r := range l.c.replicas {
		for i := range listeners {
			wg.Go(func() { l.listener(ctx, r, l.c.tokens[i%len(l.c.tokens)]) })
		}
	}
	wg.Wait()
}

// call is rpc's call, counted.
func (l *load) call(ctx context.Context, r *replica, token, method, name, params string) (json.RawMessage, error) {
	l.t.requests.Add(1)
	return call(ctx, r.mcp, token, method, name, params)
}

func randomKind(kinds []string) string { return kinds[rand.IntN(len(kinds))] }

func (l *load) readPublic(ctx context.Context, r *replica, token string) error {
	kind, i := randomKind(upstreamKinds), rand.IntN(resourceCount)
	uri := fmt.Sprintf("%s+test://%s/pub/%d", kind, kind, i)
	res, err := l.call(ctx, r, token, "resources/read", uri, fmt.Sprintf(`"uri":%q`, uri))
	if err != nil {
		return err
	}
	return expectText(res, publicText(kind, i))
}

// readPrivate reads what the upstream answers only for its caller: the
// answer must name this caller's credential, never another's.
func (l *load) readPrivate(ctx context.Context, r *replica, token string) error {
	kind := randomKind(privateKinds)
	uri := kind + "+test://" + kind + "/priv/me"
	res, err := l.call(ctx, r, token, "resources/read", uri, fmt.Sprintf(`"uri":%q`, uri))
	if err != nil {
		return err
	}
	return expectText(res, privateText(kind, "Bearer "+token))
}

func (l *load) callTool(ctx context.Context, r *replica, token string) error {
	kind, text := randomKind(upstreamKinds), strconv.FormatUint(rand.Uint64(), 36)
	res, err := l.call(ctx, r, token, "tools/call", kind+"_echo", fmt.Sprintf(`"name":%q,"arguments":{"text":%q}`, kind+"_echo", text))
	if err != nil {
		return err
	}
	return expectText(res, echoText(kind, text))
}

func (l *load) getPrompt(ctx context.Context, r *replica, token string) error {
	kind, who := randomKind(upstreamKinds), fmt.Sprintf("p%d", rand.IntN(1000))
	res, err := l.call(ctx, r, token, "prompts/get", kind+"_greet", fmt.Sprintf(`"name":%q,"arguments":{"who":%q}`, kind+"_greet", who))
	if err != nil {
		return err
	}
	return expectText(res, greeting(kind, who))
}

// listAll pages through resources/list with its cursors: each upstream's
// public resources once each, all of them (or, while something is down,
// none of a missing upstream's), and nothing that no upstream holds.
func (l *load) listAll(ctx context.Context, r *replica, token string) error {
	seen := map[string]int{}
	cursor := ""
	for page := 0; ; page++ {
		if page == 30 {
			return wrongf("resources/list did not end within 30 pages")
		}
		params := ""
		if cursor != "" {
			params = fmt.Sprintf(`"cursor":%q`, cursor)
		}
		res, err := l.call(ctx, r, token, "resources/list", "", params)
		if err != nil {
			return err
		}
		var p struct {
			Resources []struct {
				URI string `json:"uri"`
			} `json:"resources"`
			NextCursor string `json:"nextCursor"`
		}
		if err := json.Unmarshal(res, &p); err != nil {
			return wrongf("resources/list result: %v", err)
		}
		for _, it := range p.Resources {
			seen[it.URI]++
		}
		if cursor = p.NextCursor; cursor == "" {
			return l.checkListed(seen)
		}
	}
}

func (l *load) checkListed(seen map[string]int) error {
	var missing []string
	for uri, n := range seen {
		if n > 1 {
			return wrongf("%s listed %d times", uri, n)
		}
		kind, _, _ := strings.Cut(uri, "+")
		if !slices.Contains(upstreamKinds, kind) || !strings.HasPrefix(uri, kind+"+test://"+kind+"/") {
			return wrongf("%s is no upstream's", uri)
		}
	}
	for _, kind := range upstreamKinds {
		have := 0
		for i := range resourceCount {
			if seen[fmt.Sprintf("%s+test://%s/pub/%d", kind, kind, i)] == 1 {
				have++
			}
		}
		switch {
		case have == 0:
			missing = append(missing, kind)
		case have < resourceCount && !l.faulting.Load():
			return wrongf("%d of %s's %d resources listed", have, kind, resourceCount)
		case have < resourceCount:
			return fmt.Errorf("%d of %s's %d resources listed during a fault", have, kind, resourceCount)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("resources/list without %v", missing)
	}
	return nil
}

// legacySession is a 2025-11-25 caller: initialize on one replica, its
// requests on any (the session lives in Redis), and usually a DELETE; a
// third of them are abandoned, as clients that never DELETE do.
func (l *load) legacySession(ctx context.Context, r *replica, token string) error {
	s := &legacyCaller{l: l, token: token}
	if err := s.initialize(ctx, r); err != nil {
		return err
	}
	other := l.c.replicas[rand.IntN(len(l.c.replicas))]
	kind, i := randomKind(upstreamKinds), rand.IntN(resourceCount)
	uri := fmt.Sprintf("%s+test://%s/pub/%d", kind, kind, i)
	if err := s.expect(ctx, other, "resources/read", fmt.Sprintf(`{"uri":%q}`, uri), publicText(kind, i)); err != nil {
		return err
	}
	pk := randomKind(privateKinds)
	if err := s.expect(ctx, r, "resources/read", fmt.Sprintf(`{"uri":"%s+test://%s/priv/me"}`, pk, pk), privateText(pk, "Bearer "+token)); err != nil {
		return err
	}
	if err := s.expect(ctx, other, "tools/call", fmt.Sprintf(`{"name":"%s_echo","arguments":{"text":"legacy"}}`, kind), echoText(kind, "legacy")); err != nil {
		return err
	}
	if rand.IntN(3) == 0 {
		return nil // abandoned: it expires after sessions.idle_timeout
	}
	return s.end(ctx, r)
}
