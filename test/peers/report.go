package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// results holds every round's figures: scenario → concurrency → target.
type results map[string]map[int]map[string][]measured

func (r results) add(sc string, conc int, target string, m measured) {
	if r[sc] == nil {
		r[sc] = map[int]map[string][]measured{}
	}
	if r[sc][conc] == nil {
		r[sc][conc] = map[string][]measured{}
	}
	r[sc][conc][target] = append(r[sc][conc][target], m)
}

// ratios pairs each round of a target with the same round of direct.
func (r results) ratios(sc string, conc int, target string, f func(m, direct measured) float64) []float64 {
	direct, own := r[sc][conc]["direct"], r[sc][conc][target]
	out := make([]float64, len(own))
	for i := range own {
		out[i] = f(own[i], direct[i])
	}
	return out
}

// report prints one table per scenario: each target's ratios against
// direct as "median (min–max)" over the rounds.
func (r results) report(w io.Writer, targets []target, c config) {
	fmt.Fprintf(w, "%d interleaved rounds of %s per target and cell; ratio against direct: median (min–max)\n", c.rounds, c.duration)
	for _, sc := range scenarios {
		fmt.Fprintf(w, "\n%s\n\n| target | c=1 p50 vs direct | c=16 throughput vs direct | c=16 CPU per request of the hop process |\n|---|---|---|---|\n", sc.name)
		for _, t := range targets {
			if !t.serves(sc) {
				continue
			}
			p50 := r.ratios(sc.name, 1, t.name, func(m, d measured) float64 { return float64(m.p50) / float64(d.p50) })
			tput := r.ratios(sc.name, 16, t.name, func(m, d measured) float64 { return m.perSecond / d.perSecond })
			cpu := r.ratios(sc.name, 16, t.name, func(m, _ measured) float64 { return float64(m.cpuPerCall) / float64(time.Microsecond) })
			abs := r.ratios(sc.name, 1, t.name, func(m, _ measured) float64 { return float64(m.p50) / float64(time.Microsecond) })
			fmt.Fprintf(w, "| %s | %s× (%s µs) | %s | %s µs |\n", t.name, spread(p50, "%.2f"), spread(abs, "%.0f"), spread(tput, "%.2f"), spread(cpu, "%.0f"))
		}
	}
	fmt.Fprintln(w, "\nThe direct row's CPU is the upstream's own per request; each other row's is its hop process alone.")
}

// spread formats values as "median (min–max)".
func spread(vs []float64, format string) string {
	s := slices.Sorted(slices.Values(vs))
	if len(s) == 0 {
		return "–"
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s[len(s)/2], s[0], s[len(s)-1])
}
