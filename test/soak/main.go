// Command soak runs Manifold as it is deployed, for as long as asked, and
// checks every answer: several replicas (`manifold serve`) sharing a real
// Redis, in front of upstreams of every kind (stateless Streamable HTTP of
// 2026-07-28, legacy Streamable HTTP with sessions, the 2024-11-05 HTTP+SSE
// transport, and a stdio child of each replica), each a process of this
// machine. Several principals, each with its own bearer token, read public
// and private resources, page through merged lists with their cursors,
// call tools, get prompts, keep listen streams open and open legacy
// sessions (some ended, some abandoned). With -faults, every -fault-every
// an upstream is killed and restarted, Redis stopped and later killed, a
// stdio child killed, or the configuration reloaded.
//
// Every answer is checked: valid JSON-RPC, its own id, the content the
// upstream holds, a private answer only for its own caller. A failure to
// answer (while something is down) is an error; anything else is wrong.
// Each replica's RSS, goroutines (from its /metrics) and open fds are
// sampled throughout, into a CSV file; the figures at rest after the
// warm-up and at the end are compared, and a growth past a bound is a leak.
// The run ends with one line on stdout,
//
//	soak: requests=N errors=N wrong=N leaks=N rss_start_mib=X rss_end_mib=Y goroutines_start=N goroutines_end=N fds_start=N fds_end=N
//
// the figures summed over the replicas, and exits 1 if wrong or leaks is
// not 0. The load is bounded (-rate, -workers), and so is the time: a run
// that outlives -duration by more than a few minutes is stopped. Every
// process it started is stopped at the end.
//
//	scripts/soak [-duration 15m] [-replicas 2] [-faults]
//
// The same binary serves the upstreams (-serve modern|legacy|sse|stdio),
// and draws the samples of a run as an SVG (-plot-from CSV -plot SVG).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

type options struct {
	manifold   string
	duration   time.Duration
	replicas   int
	principals int
	faults     bool
	faultEvery time.Duration
	workers    int
	listeners  int
	rate       float64
	sample     time.Duration
	dir, csv   string
	plot       string
}

func main() {
	serve := flag.String("serve", "", "run an upstream instead: modern, legacy, sse or stdio")
	name := flag.String("name", "", "with -serve: the upstream's name")
	addr := flag.String("addr", "127.0.0.1:0", "with -serve: the address to listen on")
	var o options
	flag.StringVar(&o.manifold, "manifold", "bin/manifold", "the manifold binary")
	flag.DurationVar(&o.duration, "duration", 15*time.Minute, "how long the load runs, warm-up included")
	flag.IntVar(&o.replicas, "replicas", 2, "replicas sharing Redis")
	flag.IntVar(&o.principals, "principals", 6, "callers, each with a bearer token of its own")
	flag.BoolVar(&o.faults, "faults", false, "inject faults every -fault-every")
	flag.DurationVar(&o.faultEvery, "fault-every", 3*time.Minute, "with -faults: the time between two faults")
	flag.IntVar(&o.workers, "workers", 4, "requests in flight at most (plus the listen streams)")
	flag.IntVar(&o.listeners, "listeners", 2, "listen streams held open per replica")
	flag.Float64Var(&o.rate, "rate", 40, "operations a second at most, all replicas together")
	flag.DurationVar(&o.sample, "sample", 0, "the sampling interval (default: a hundredth of -duration, 2s to 30s)")
	flag.StringVar(&o.dir, "dir", "", "where the logs, configurations and samples go (default: a new temporary folder)")
	flag.StringVar(&o.csv, "csv", "", "the samples' CSV file (default: DIR/samples.csv)")
	flag.StringVar(&o.plot, "plot", "", "the samples drawn as an SVG file (default: DIR/samples.svg)")
	plotFrom := flag.String("plot-from", "", "only draw this CSV file of an earlier run, as -plot")
	flag.Parse()
	if *plotFrom != "" {
		if err := plotSamples(*plotFrom, o.plot); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(2)
		}
		return
	}
	if *serve != "" {
		if err := serveUpstream(*serve, *name, *addr); err != nil {
			fmt.Fprintln(os.Stderr, "soak upstream:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run(o))
}

func run(o options) int {
	if err := o.defaults(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The soak's own bound: the load, then a few minutes for the rest.
	ctx, cancel := context.WithTimeout(ctx, o.duration+4*time.Minute)
	defer cancel()
	fmt.Fprintf(os.Stderr, "soak: %d replicas, %v, faults %v; logs and samples in %s\n", o.replicas, o.duration, o.faults, o.dir)
	c, err := startCluster(o)
	if c != nil {
		defer c.procs.stopAll()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	t := &tally{}
	rec, err := newRecorder(o.csv, t)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	defer rec.close()
	res, err := soak(ctx, o, c, t, rec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	if err := plotSamples(o.csv, o.plot); err != nil {
		fmt.Fprintln(os.Stderr, "soak: plot:", err)
	}
	fmt.Fprintf(os.Stderr, "soak: samples in %s, drawn in %s\n", o.csv, o.plot)
	fmt.Println(res.line(t))
	if t.wrong.Load() != 0 || res.leaks != 0 {
		return 1
	}
	return 0
}

func (o *options) defaults() error {
	if o.replicas < 1 || o.principals < 1 || o.workers < 1 || o.rate <= 0 || o.duration < 10*time.Second {
		return fmt.Errorf("-replicas, -principals, -workers and -rate must be positive, -duration at least 10s")
	}
	if o.sample <= 0 {
		o.sample = min(max(o.duration/100, 2*time.Second), 30*time.Second)
	}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "manifold-soak-")
		if err != nil {
			return err
		}
		o.dir = d
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	if o.csv == "" {
		o.csv = filepath.Join(o.dir, "samples.csv")
	}
	if o.plot == "" {
		o.plot = filepath.Join(o.dir, "samples.svg")
	}
	abs, err := filepath.Abs(o.manifold)
	o.manifold = abs
	return err
}
