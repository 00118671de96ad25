package main

// The scale curves (-scale): how Manifold's latency and memory grow with
// load, each figure against the floor a bare process sets under the same
// client, so that what the machine and the load generator cost is not
// charged to Manifold.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

var scaleConcurrency = []int{1, 16, 64, 256}

const (
	idleStreams = 1000 // idle listen streams opened per process and round
	fanOut      = 16   // upstreams resources/list is spread over
)

var listScenario = scenario{"resources/list", false, func(target) request {
	return legacyRequest(`{"jsonrpc":"2.0","id":2,"method":"resources/list","params":{}}`)
}}

// scaleRun is what the parts of a scale run share.
type scaleRun struct {
	c          config
	self, dir  string
	upstreamsY string // Manifold's upstreams section for the idle streams' upstream
	procs      *processes
	hits       [2]float64 // the cached Manifolds' memory hits and upstream fills
}

// pair is a Manifold target and the reference it is measured against.
type pair struct {
	name          string
	ref, manifold target
}

// runScale runs the three parts in turn, printing each one's table when it
// ends, and stops every process it started.
func runScale(c config) error {
	dir, err := os.MkdirTemp("", "manifold-scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var procs processes
	defer procs.stopAll()
	up, err := procs.startPrinting(self, "-serve", "upstream")
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	s := &scaleRun{c: c, self: self, dir: dir, procs: &procs, upstreamsY: upstreamsYAML("http://" + up.addr + "/mcp")}
	fmt.Printf("Scale curves: %d interleaved rounds of %s per target and cell; each figure is median (min–max) over the rounds.\n",
		c.rounds, c.duration)
	parts := []func() error{s.curves, s.idle, s.fanOut}
	if c.fanOutOnly {
		parts = parts[2:]
	}
	for _, part := range parts {
		if err := part(); err != nil {
			return err
		}
	}
	return nil
}

func upstreamsYAML(url string) string {
	return fmt.Sprintf("upstreams:\n  - {name: bench, url: %q}\n", url)
}

// curves measures latency, throughput and peak RSS against concurrency, for
// cache hits and for pass-through reads.
func (s *scaleRun) curves() error {
	res := results{}
	var pairs []pair
	for round := range s.c.rounds {
		var err error
		if pairs, err = s.curveRound(round, res); err != nil {
			return err
		}
		progress("latency and RSS curves", round, s.c.rounds)
	}
	reportCurves(os.Stdout, res, pairs)
	fmt.Printf("\nThe cached Manifolds served %.0f memory hits and made %.0f upstream fills in all.\n", s.hits[0], s.hits[1])
	return nil
}

// curveRound runs one round in fresh processes, concurrency ascending: a Go
// process keeps the memory it once used, so a cell run after a busier one
// would report the busier one's RSS as its peak.
func (s *scaleRun) curveRound(round int, res results) ([]pair, error) {
	var procs processes
	defer procs.stopAll()
	pairs, err := s.curveTargets(&procs)
	if err != nil {
		return nil, err
	}
	for _, conc := range scaleConcurrency {
		for _, p := range pairs {
			for _, t := range rotate([]target{p.ref, p.manifold}, round) {
				m, err := measurePeak(t, scenarios[0], conc, s.c.duration)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, c=%d: %w", p.name, t.name, conc, err)
				}
				res.add(p.name, conc, t.name, m)
			}
		}
	}
	hits, fills, err := cacheCounts(pairs[0].manifold)
	if err != nil {
		return nil, fmt.Errorf("manifold's metrics: %w", err)
	}
	s.hits[0], s.hits[1] = s.hits[0]+hits, s.hits[1]+fills
	return pairs, nil
}

// curveTargets starts an upstream; Manifold with its memory cache on default
// settings and the bare handler serving its answer to a hit; and Manifold
// with the cache off.
func (s *scaleRun) curveTargets(procs *processes) ([]pair, error) {
	up, err := procs.startPrinting(s.self, "-serve", "upstream")
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	direct := target{name: "direct upstream", url: "http://" + up.addr + "/mcp", uri: "test://bench/doc", pid: up.pid}
	cached, err := s.manifold(procs, "cached", upstreamsYAML(direct.url))
	if err != nil {
		return nil, fmt.Errorf("manifold: %w", err)
	}
	cached.name, cached.uri = "Manifold, memory hit", "bench+test://bench/cached"
	file, err := s.captureHit(cached)
	if err != nil {
		return nil, fmt.Errorf("manifold, capturing a hit: %w", err)
	}
	b, err := procs.startPrinting(s.self, "-serve", "bare", "-body", file)
	if err != nil {
		return nil, fmt.Errorf("bare: %w", err)
	}
	bare := target{name: "bare net/http", url: "http://" + b.addr + "/mcp", pid: b.pid}
	pass, err := s.manifold(procs, "pass", "cache: {memory: {max_bytes: 0}}\n"+upstreamsYAML(direct.url))
	if err != nil {
		return nil, fmt.Errorf("manifold: %w", err)
	}
	pass.name, pass.uri = "Manifold, cache off", "bench+test://bench/doc"
	return []pair{
		{"memory-cache hit, resources/read of a 1 KiB resource (ttlMs 600000, public)", bare, cached},
		{"pass-through resources/read of a 1 KiB resource (cache off)", direct, pass},
	}, nil
}

// manifold starts Manifold with yaml after its listen line.
func (s *scaleRun) manifold(procs *processes, name, yaml string) (target, error) {
	addr, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	cfg := filepath.Join(s.dir, name+".yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "listen: %s\nlog: {level: error}\n%s", addr, yaml), 0o600); err != nil {
		return target{}, err
	}
	pid, err := procs.startListening(addr, s.c.manifold, "serve", "--config", cfg)
	if err != nil {
		return target{}, err
	}
	return target{name: "Manifold", url: "http://" + addr + "/mcp", pid: pid}, nil
}

// captureHit fills Manifold's cache and keeps its answer to a hit, which
// the bare reference then serves byte for byte.
func (s *scaleRun) captureHit(t target) (string, error) {
	sid, err := initialize(t.url)
	if err != nil {
		return "", err
	}
	defer closeSessions(t.url, []string{sid})
	req := scenarios[0].build(t)
	var out []byte
	for range 2 { // the first read fills the cache, the second hits
		if _, out, err = post(t.url, sid, req); err != nil {
			return "", err
		}
	}
	if !bytes.Contains(out, []byte(payload)) {
		return "", fmt.Errorf("the answer lacks the payload: %.300s", out)
	}
	file := filepath.Join(s.dir, "hit.json")
	return file, os.WriteFile(file, out, 0o600)
}

// measurePeak is measure with the target's peak RSS over the run. It closes
// its sessions after, so that they do not pile up in the later cells' RSS.
func measurePeak(t target, sc scenario, conc int, d time.Duration) (measured, error) {
	sessions, err := openSessions(t.url, conc, sc.modern)
	if err != nil {
		return measured{}, err
	}
	defer closeSessions(t.url, sessions)
	req := sc.build(t)
	if err := call(t.url, sessions[0], req); err != nil { // and warm up
		return measured{}, err
	}
	if err := resetPeakRSS(t.pid); err != nil {
		return measured{}, fmt.Errorf("resetting the peak RSS: %w", err)
	}
	cpu0, behind0, start := cpuTime(t.pid), cpuBehind(t), time.Now()
	all, err := drive(t.url, sessions, req, start.Add(d))
	if err != nil {
		return measured{}, err
	}
	m := summarize(all, time.Since(start), cpuTime(t.pid)-cpu0)
	m.cpuBehind = (cpuBehind(t) - behind0) / time.Duration(len(all))
	m.peakRSS = peakRSS(t.pid)
	return m, nil
}

// cpuBehind is the CPU used so far by the processes behind t.
func cpuBehind(t target) time.Duration {
	var sum time.Duration
	for _, pid := range t.behind {
		sum += cpuTime(pid)
	}
	return sum
}

// cacheCounts reads from Manifold's metrics the memory hits it served and
// the upstream calls it made to fill its cache.
func cacheCounts(t target) (hits, fills float64, err error) {
	resp, err := client.Get(strings.TrimSuffix(t.url, "/mcp") + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("HTTP %d, %v", resp.StatusCode, err)
	}
	sum := func(name, label string) (n float64) {
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
				v, _ := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), 64)
				n += v
			}
		}
		return n
	}
	return sum("manifold_cache_hits_total", `tier="memory"`), sum("manifold_cache_fills_total", ""), nil
}

func progress(part string, round, rounds int) {
	fmt.Fprintf(os.Stderr, "%s: round %d of %d done\n", part, round+1, rounds)
}
