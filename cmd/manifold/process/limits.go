package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/ratelimit"
)

// limits are the process's rate limiters, sharing one Redis client when the
// cache has Redis; nil limiters are off.
type limits struct {
	principal, upstream *ratelimit.Limiter
	client              redis.UniversalClient
	refused             *prometheus.CounterVec
}

func newLimits(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) *limits {
	l := &limits{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifold_rate_limited_total", Help: "Requests refused by a rate limit, by limit (principal or upstream) and upstream (for the per-upstream limit).",
	}, []string{"limit", "upstream"})}
	reg.MustRegister(l.refused)
	var shared ratelimit.Shared
	pp, pu := cfg.Limits.PerPrincipal, cfg.Limits.PerUpstream
	if co, err := cacheOptions(cfg, log); err == nil && co.Redis != nil && (pp.Rate > 0 || pu.Rate > 0) {
		opts := co.Redis.Client
		opts.ContextTimeoutEnabled = true // the limiter bounds each call by its context: Timeout
		l.client = redis.NewUniversalClient(&opts)
		shared = ratelimit.Shared{Client: l.client, Prefix: co.Redis.Prefix, Timeout: co.Redis.Timeout}
	}
	if pp.Rate > 0 {
		l.principal = ratelimit.New("principal", ratelimit.Limit{Rate: pp.Rate, Burst: pp.Burst}, shared)
	}
	if pu.Rate > 0 {
		l.upstream = ratelimit.New("upstream", ratelimit.Limit{Rate: pu.Rate, Burst: pu.Burst}, shared)
	}
	return l
}

// stdioPrincipal keys the one caller of manifold stdio in the limits: this
// process on this machine, so that stdio processes sharing Redis limits
// (several hosts, each with its own) do not share one bucket.
func stdioPrincipal() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("stdio:%s:%d", host, os.Getpid())
}

// principalRefused counts a refusal of the per-principal limit (the
// principal itself is never a label).
func (l *limits) principalRefused() { l.refused.WithLabelValues("principal", "").Inc() }

// admit is router.Options.Admit: the per-upstream limit.
func (l *limits) admit(ctx context.Context, upstream string) error {
	if ok, after := l.upstream.Allow(ctx, upstream); !ok {
		l.refused.WithLabelValues("upstream", upstream).Inc()
		return ratelimit.Error("per upstream", after)
	}
	return nil
}

// admitHook is admit when the per-upstream limit is on.
func (l *limits) admitHook() func(context.Context, string) error {
	if l.upstream == nil {
		return nil
	}
	return l.admit
}

func (l *limits) close() error {
	if l.client == nil {
		return nil
	}
	return l.client.Close()
}
