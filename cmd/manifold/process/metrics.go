package process

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router"
	"github.com/manifold-mcp/manifold/upstream"
)

// latencyBuckets span a memory hit (tens of µs) to a long tool call.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// metrics are the process's Prometheus metrics. Labels are bounded: a
// method is one of the method table's or "other", an upstream one of the
// configured names, an endpoint /mcp or a configured endpoint's path, a
// code a JSON-RPC code; never a URI or a credential.
type metrics struct {
	reg              *prometheus.Registry
	requests         *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	upstreamDuration *prometheus.HistogramVec
	reloads          *prometheus.CounterVec
	// series holds each endpoint and method's histogram and success
	// counter, resolved once: a label lookup hashes and allocates, and a
	// request's hook runs on every hit.
	series map[seriesKey]methodSeries
}

type seriesKey struct{ endpoint, method string }

type methodSeries struct {
	duration prometheus.Observer
	ok       prometheus.Counter
}

func newMetrics(p *Process) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "manifold_requests_total", Help: "Downstream requests answered, by endpoint (its path), method and JSON-RPC outcome (ok, or the error code).",
		}, []string{"endpoint", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "manifold_request_duration_seconds", Help: "Time to answer a downstream request, by endpoint (its path) and method.", Buckets: latencyBuckets,
		}, []string{"endpoint", "method"}),
		upstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "manifold_upstream_request_duration_seconds", Help: "Time of one exchange with an upstream.", Buckets: latencyBuckets,
		}, []string{"upstream", "method"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "manifold_config_reloads_total", Help: "Configuration reloads, by result (success or failure).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.upstreamDuration, m.reloads,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "manifold_subscriptions_open", Help: "Open subscription streams (listens and legacy sessions' streams)."},
			func() float64 { return float64(p.hub.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "manifold_sessions_open", Help: "Legacy sessions in use: used within two keep-alive intervals (in this process, or in Redis)."},
			func() float64 { return float64(p.openSessions()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "manifold_sessions_held", Help: "Legacy sessions kept, in use or idle, until their idle timeout: they count against sessions.max."},
			func() float64 { return float64(p.sessions.Len()) }),
		&stateCollector{p: p},
	)
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	m.series = map[seriesKey]methodSeries{}
	endpoints := []string{upstream.MainPath}
	for _, e := range p.cfg.Endpoints {
		endpoints = append(endpoints, e.Path)
	}
	for _, e := range endpoints {
		for _, method := range slices.Concat(mcp.Names(), mcp.SessionMethods, []string{"other"}) {
			m.series[seriesKey{e, method}] = methodSeries{m.duration.WithLabelValues(e, method), m.requests.WithLabelValues(e, method, "ok")}
		}
	}
	return m
}

// request is router.Observed's hook.
func (m *metrics) request(ctx context.Context, method string, d time.Duration, err error) {
	endpoint := upstream.ViewOf(ctx).Name()
	s, ok := m.series[seriesKey{endpoint, method}]
	if !ok {
		method = "other"
		if s, ok = m.series[seriesKey{endpoint, method}]; !ok {
			return // no such endpoint: views are made of the same configuration
		}
	}
	s.duration.Observe(d.Seconds())
	if err == nil {
		s.ok.Inc()
		return
	}
	m.requests.WithLabelValues(endpoint, method, codeLabel(err)).Inc()
}

// upstream returns an upstream's Observe hook.
func (m *metrics) upstream(name string) func(string, time.Duration, error) {
	observers := map[string]prometheus.Observer{}
	for _, method := range append(mcp.Names(), "other") {
		observers[method] = m.upstreamDuration.WithLabelValues(name, method)
	}
	return func(method string, d time.Duration, _ error) {
		o, ok := observers[method]
		if !ok {
			o = observers["other"]
		}
		o.Observe(d.Seconds())
	}
}

// codeLabel is router.Code with the codes an upstream may make up (any
// outside the JSON-RPC and MCP ones) counted as one, "application": a label
// takes values from a bounded set.
func codeLabel(err error) string {
	code := router.Code(err)
	switch code {
	case "ok", "-32700", "-32600", "-32601", "-32602", "-32603", "-32020", "-32021", "-32022", "-32002":
		return code
	}
	return "application"
}

// stateCollector reports what is read at scrape time: each upstream's
// state, the cache's counters (kept as atomics on the hot path) and Redis.
type stateCollector struct{ p *Process }

var (
	descUp          = prometheus.NewDesc("manifold_upstream_up", "1 while the upstream is ready.", []string{"upstream"}, nil)
	descHits        = prometheus.NewDesc("manifold_cache_hits_total", "Answers served from a cache tier.", []string{"upstream", "tier"}, nil)
	descMisses      = prometheus.NewDesc("manifold_cache_misses_total", "Lookups found in no tier.", []string{"upstream"}, nil)
	descFills       = prometheus.NewDesc("manifold_cache_fills_total", "Upstream calls made to fill misses.", []string{"upstream"}, nil)
	descCoalesced   = prometheus.NewDesc("manifold_cache_coalesced_total", "Misses that waited on another caller's fill instead of calling the upstream.", []string{"upstream"}, nil)
	descShared      = prometheus.NewDesc("manifold_cache_shared_fills_total", "Misses answered by another replica's fill, waited for under its fill lease in Redis.", []string{"upstream"}, nil)
	descRefreshed   = prometheus.NewDesc("manifold_cache_refreshes_total", "Entries refilled in the background before expiry because they were read near it.", []string{"upstream"}, nil)
	descStale       = prometheus.NewDesc("manifold_cache_stale_served_total", "Stale entries served because the upstream could not be reached.", []string{"upstream"}, nil)
	descBypassed    = prometheus.NewDesc("manifold_cache_bypassed_total", "Requests that may not be cached (non-cacheable methods, multi round-trip retries).", []string{"upstream"}, nil)
	descInvalidated = prometheus.NewDesc("manifold_cache_invalidations_total", "Invalidations made on this replica.", []string{"upstream"}, nil)
	descEvictions   = prometheus.NewDesc("manifold_cache_evictions_total", "Entries evicted from the memory tier to make room.", []string{"tier"}, nil)
	descRedisErrors = prometheus.NewDesc("manifold_cache_redis_errors_total", "Redis commands that failed or timed out.", nil, nil)
	descDropped     = prometheus.NewDesc("manifold_cache_redis_writes_dropped_total", "Redis writes skipped because too many were in flight.", nil, nil)
	descBreaker     = prometheus.NewDesc("manifold_cache_redis_breaker_open", "1 while the Redis circuit breaker is open.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descHits, descMisses, descFills, descCoalesced, descShared, descRefreshed, descStale, descBypassed, descInvalidated, descEvictions, descRedisErrors, descDropped, descBreaker} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.p.upstreams.Load().All() {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, bool01(u.State() == upstream.Ready), u.Name())
	}
	st := c.p.cache.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for name, s := range st.Upstreams {
		counter(descHits, s.MemoryHits, name, "memory")
		counter(descHits, s.RedisHits, name, "redis")
		counter(descMisses, s.Misses, name)
		counter(descFills, s.Fills, name)
		counter(descCoalesced, s.Coalesced, name)
		counter(descShared, s.SharedFills, name)
		counter(descRefreshed, s.Refreshed, name)
		counter(descStale, s.Stale, name)
		counter(descBypassed, s.Bypassed, name)
		counter(descInvalidated, s.Invalidations, name)
	}
	counter(descEvictions, st.Evictions, "memory")
	if r := st.Redis; r != nil {
		counter(descRedisErrors, r.Errors)
		counter(descDropped, r.WritesDropped)
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, bool01(r.BreakerOpen))
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// seenBy is g without the series of the upstreams a does not see, and of
// the endpoints it may not use: a series names an upstream by its
// "upstream" label (empty: none), an endpoint by its "endpoint" label. A family left
// with no series is left out, as the exposition has no empty family.
func seenBy(g prometheus.Gatherer, a audience) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := g.Gather()
		hidden := func(m *dto.Metric) bool {
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() == "upstream" && l.GetValue() != "":
					return !a.sees(l.GetValue())
				case l.GetName() == "endpoint":
					return !a.uses(l.GetValue())
				}
			}
			return false
		}
		for _, f := range fams {
			f.Metric = slices.DeleteFunc(f.Metric, hidden)
		}
		return slices.DeleteFunc(fams, func(f *dto.MetricFamily) bool { return len(f.Metric) == 0 }), err
	})
}
