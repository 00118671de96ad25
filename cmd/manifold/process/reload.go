package process

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/upstream"
)

// Reload reads the configuration file again and applies what can change
// while serving: the upstreams. Added ones start; removed ones stop once
// their calls under way have ended; changed ones are replaced that way, and
// their cached entries made stale. Unchanged ones, and the listen streams
// they carry, are not touched. Any other setting that changed is reported
// as needing a restart and left as it is. An invalid file changes nothing.
func (p *Process) Reload(ctx context.Context) error {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	p.reopenAudit() // whatever becomes of the file: a rotation must not wait on it
	if p.cfg.File == "" {
		return errors.New("reload: the configuration was not read from a file")
	}
	next, err := config.LoadWith(p.cfg.File, p.cfg.Flags)
	if err == nil {
		err = p.swapUpstreams(ctx, next.Upstreams)
	}
	if err != nil {
		p.metrics.reloads.WithLabelValues("failure").Inc()
		var ce *config.Error
		if errors.As(err, &ce) {
			problems := make([]string, len(ce.Problems))
			for i, pr := range ce.Problems {
				problems[i] = pr.String()
			}
			p.log.Error("reload refused; the current configuration goes on serving", "file", ce.File, "problems", problems)
		} else {
			p.log.Error("reload failed; the current configuration goes on serving", "err", err)
		}
		return err
	}
	if keys := restartKeys(p.cfg, next); len(keys) > 0 {
		p.log.Warn("reload: these settings take effect only after a restart", "keys", keys)
	}
	p.cfg.Upstreams = next.Upstreams
	p.metrics.reloads.WithLabelValues("success").Inc()
	return nil
}

// swapUpstreams makes ucs the served upstreams, in three steps: build the
// new set, swap it in, retire what of the old one it does not hold.
func (p *Process) swapUpstreams(ctx context.Context, ucs []config.Upstream) error {
	old := p.upstreams.Load()
	next, fresh, err := p.buildSet(ctx, old, ucs)
	if err != nil {
		return err
	}
	p.upstreams.Swap(next) // the hub and the cache follow inside (Registry.OnSwap)
	p.startUpstreams(p.started, fresh)
	p.retireSet(old, next)
	go p.noteReadiness()
	return nil
}

// buildSet makes the set of ucs, keeping the upstreams of old whose
// configuration is unchanged (and the listen streams they carry), and
// building the others, which it returns as fresh. Nothing is served from it
// yet: on a failure the fresh ones are closed, and old goes on.
func (p *Process) buildSet(ctx context.Context, old *upstream.Set, ucs []config.Upstream) (next *upstream.Set, fresh []*upstream.Upstream, err error) {
	was := map[string]config.Upstream{}
	for _, uc := range p.cfg.Upstreams {
		was[uc.Name] = uc
	}
	var ups []*upstream.Upstream
	var added, changed, unchanged []string
	for _, uc := range ucs {
		prev, existed := was[uc.Name]
		if u := old.Get(uc.Name); u != nil && existed && reflect.DeepEqual(prev, uc) {
			ups = append(ups, u)
			unchanged = append(unchanged, uc.Name)
			continue
		}
		u, err := p.newUpstream(uc)
		if err != nil {
			closeAll(ctx, fresh, p.log)
			return nil, nil, err
		}
		ups, fresh = append(ups, u), append(fresh, u)
		if existed {
			changed = append(changed, uc.Name)
		} else {
			added = append(added, uc.Name)
		}
	}
	p.log.Info("configuration reloaded", "added", added, "removed", removedFrom(old, ucs), "changed", changed, "unchanged", unchanged)
	return upstream.NewSet(ups), fresh, nil
}

// removedFrom names the upstreams of old that ucs does not configure.
func removedFrom(old *upstream.Set, ucs []config.Upstream) []string {
	kept := map[string]bool{}
	for _, uc := range ucs {
		kept[uc.Name] = true
	}
	var removed []string
	for _, name := range old.Names() {
		if !kept[name] {
			removed = append(removed, name)
		}
	}
	return removed
}

// retireSet retires what of old next does not hold: each upstream once its
// calls under way have ended, and its OAuth client at once, whose grants
// the client of the upstream that replaced it takes over when its OAuth
// configuration is the same (a new one starts afresh).
func (p *Process) retireSet(old, next *upstream.Set) {
	var retired []*upstream.Upstream
	for _, u := range old.All() {
		n := next.Get(u.Name())
		if n == u {
			continue
		}
		retired = append(retired, u)
		if c := u.OAuth(); c != nil {
			if n != nil && n.OAuth() != nil {
				n.OAuth().TakeOver(c)
			}
			closeClient(c)
		}
	}
	go p.retire(retired)
}

// revalidateReplaced makes stale the cached answers of every upstream a
// swap replaced or removed (inside the swap, so that no answer of the new
// set is served as fresh from the old one's entries); they stay usable
// while the new one cannot be reached. Its tool results are dropped: what
// its tools do may be what changed.
func (p *Process) revalidateReplaced(old, next *upstream.Set) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, u := range old.All() {
		if next.Get(u.Name()) != u {
			p.cache.Revalidate(ctx, u.Name())
			if u.ToolCache().TTL > 0 {
				p.cache.Invalidate(ctx, u.Name(), mcp.TagToolResults)
			}
		}
	}
}

// retire closes replaced upstreams once their calls under way have ended,
// giving each the longest a call may take.
func (p *Process) retire(ups []*upstream.Upstream) {
	for _, u := range ups {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), retireWait)
			defer cancel()
			if err := u.Retire(ctx); err != nil {
				p.log.Warn("closing a retired upstream", "upstream", u.Name(), "err", err)
			}
		}()
	}
}

// retireWait bounds how long a replaced upstream's calls may go on.
const retireWait = 5 * time.Minute

// restartKeys names the top-level settings that differ between cur and
// next, upstreams aside: the ones a reload cannot apply.
func restartKeys(cur, next *config.Config) []string {
	var keys []string
	a, b := reflect.ValueOf(*cur), reflect.ValueOf(*next)
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		name := t.Field(i).Tag.Get("yaml")
		if name == "upstreams" || name == "-" || name == "" {
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			keys = append(keys, name)
		}
	}
	return keys
}

// reloadHandler is the admin listener's POST /reload: 200 when applied,
// 422 with the problems when the file is refused.
func (p *Process) reloadHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := p.Reload(r.Context()); err != nil {
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "reloaded")
}
