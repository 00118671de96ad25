package main

import (
	"fmt"
	"io"
	"runtime"
	"time"
)

const mib = 1 << 20

// field is one figure from every round.
func field(ms []measured, f func(measured) float64) []float64 {
	out := make([]float64, len(ms))
	for i, m := range ms {
		out[i] = f(m)
	}
	return out
}

// paired divides each round's figure of a by the same round's of b, so
// that drift between rounds cancels out of the ratio.
func paired(a, b []measured, f func(measured) float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = f(a[i]) / f(b[i])
	}
	return out
}

func p50us(m measured) float64 { return float64(m.p50) / float64(time.Microsecond) }
func p99us(m measured) float64 { return float64(m.p99) / float64(time.Microsecond) }

// reportCurves prints one table per pair: a row per concurrency and
// target, Manifold's with its p99 against the reference's.
func reportCurves(w io.Writer, res results, pairs []pair) {
	for _, p := range pairs {
		fmt.Fprintf(w, "\n### %s\n\n| c | target | p50 µs | p99 µs | requests/s | peak RSS MiB | p99 vs %s |\n|---:|---|---:|---:|---:|---:|---:|\n",
			p.name, p.ref.name)
		for _, conc := range scaleConcurrency {
			ref, own := res[p.name][conc][p.ref.name], res[p.name][conc][p.manifold.name]
			curveRow(w, conc, p.ref.name, ref, "–")
			curveRow(w, conc, p.manifold.name, own, spread(paired(own, ref, p99us), "%.2f")+"×")
		}
	}
	fmt.Fprintf(w, "\nPeak RSS is the serving process's own (VmHWM, reset before each cell; fresh processes each round, concurrency ascending): "+
		"the reference's, or Manifold's alone without its upstream. The load generator shares the machine's %d cores.\n", runtime.NumCPU())
}

func curveRow(w io.Writer, conc int, name string, ms []measured, ratio string) {
	fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s |\n", conc, name,
		spread(field(ms, p50us), "%.0f"), spread(field(ms, p99us), "%.0f"),
		spread(field(ms, func(m measured) float64 { return m.perSecond }), "%.0f"),
		spread(field(ms, func(m measured) float64 { return float64(m.peakRSS) / mib }), "%.1f"), ratio)
}

// reportIdle prints the RSS idle listen streams cost each target, and
// Manifold's own share: its cost less the bare server's, round by round.
func reportIdle(w io.Writer, res map[string][]idleCost, targets []idleTarget) {
	fmt.Fprintf(w, "\n### RSS per idle subscriptions/listen stream (%d streams, a fresh process per round)\n\n", idleStreams)
	fmt.Fprintln(w, "| target | RSS before MiB | RSS after MiB | KiB per stream |\n|---|---:|---:|---:|")
	perStream := map[string][]float64{}
	for _, t := range targets {
		var before, after []float64
		for _, c := range res[t.name] {
			before, after = append(before, float64(c.before)/mib), append(after, float64(c.after)/mib)
			perStream[t.name] = append(perStream[t.name], c.perStream()/1024)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.name, spread(before, "%.1f"), spread(after, "%.1f"), spread(perStream[t.name], "%.1f"))
	}
	own, bare := perStream[targets[0].name], perStream[targets[1].name]
	diff := make([]float64, min(len(own), len(bare)))
	for i := range diff {
		diff[i] = own[i] - bare[i]
	}
	fmt.Fprintf(w, "\n%s's own cost per stream, over the bare server's: %s KiB. RSS is VmRSS, 1 s after the last acknowledgement.\n",
		targets[0].name, spread(diff, "%.1f"))
}

// reportFanOut prints the list fan-out against the slowest upstream alone.
func reportFanOut(w io.Writer, res results, slowest, m target) {
	fmt.Fprintf(w, "\n### resources/list over %d upstreams (cache off), 2 ms + i×0.5 ms each, c=1\n\n", fanOut)
	fmt.Fprintf(w, "| target | p50 µs | p99 µs | p50 vs the slowest alone | CPU µs per request: this process | CPU µs per request: its upstreams |\n|---|---:|---:|---:|---:|---:|\n")
	ref := res[listScenario.name][1][slowest.name]
	for _, t := range []target{slowest, m} {
		ms, ratio := res[listScenario.name][1][t.name], "–"
		if t.name != slowest.name {
			ratio = spread(paired(ms, ref, p50us), "%.2f") + "×"
		}
		cpu := field(ms, func(m measured) float64 { return float64(m.cpuPerCall) / float64(time.Microsecond) })
		behind := "–"
		if len(t.behind) > 0 {
			behind = spread(field(ms, func(m measured) float64 { return float64(m.cpuBehind) / float64(time.Microsecond) }), "%.0f")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", t.name, spread(field(ms, p50us), "%.0f"), spread(field(ms, p99us), "%.0f"),
			ratio, spread(cpu, "%.0f"), behind)
	}
	// On a small machine the fan-out is bound by CPU, not by waiting: say
	// how much of its latency the CPU alone accounts for.
	floor := field(res[listScenario.name][1][m.name], func(x measured) float64 {
		return float64(x.cpuPerCall+x.cpuBehind) / float64(time.Microsecond) / float64(runtime.NumCPU())
	})
	fmt.Fprintf(w, "\nOn %d cores the CPU of Manifold and its %d upstreams alone takes %s µs of each fan-out request, if perfectly spread.\n",
		runtime.NumCPU(), fanOut, spread(floor, "%.0f"))
}
