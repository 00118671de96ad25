package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// fanOut measures resources/list through Manifold (cache off) over fanOut
// upstream processes, the i-th answering after 2 ms + i×0.5 ms, against the
// slowest of them alone: a fan-out can at best take the slowest one's time.
func (s *scaleRun) fanOut() error {
	var ups strings.Builder
	ups.WriteString("upstreams:\n")
	var slowest target
	var pids []int
	for i := range fanOut {
		delay := 2*time.Millisecond + time.Duration(i)*500*time.Microsecond
		u, err := s.procs.startPrinting(s.self, "-serve", "upstream", "-delay", delay.String())
		if err != nil {
			return fmt.Errorf("upstream %d: %w", i, err)
		}
		url := "http://" + u.addr + "/mcp"
		pids = append(pids, u.pid)
		fmt.Fprintf(&ups, "  - {name: u%d, url: %q}\n", i, url)
		slowest = target{name: "slowest upstream alone (" + delay.String() + ")", url: url, pid: u.pid}
	}
	m, err := s.manifold(s.procs, "fanout", "cache: {memory: {max_bytes: 0}}\n"+ups.String())
	if err != nil {
		return fmt.Errorf("manifold over %d upstreams: %w", fanOut, err)
	}
	m.name, m.behind = fmt.Sprintf("Manifold over %d upstreams", fanOut), pids
	res := results{}
	for round := range s.c.rounds {
		for _, t := range rotate([]target{slowest, m}, round) {
			got, err := measurePeak(t, listScenario, 1, s.c.duration)
			if err != nil {
				return fmt.Errorf("fan-out, %s: %w", t.name, err)
			}
			res.add(listScenario.name, 1, t.name, got)
		}
		progress("list fan-out", round, s.c.rounds)
	}
	reportFanOut(os.Stdout, res, slowest, m)
	return nil
}
