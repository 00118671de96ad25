// Package metrics exposes counters and gauges in the Prometheus text format.
//
// Components keep their own counters (plain atomics on their hot paths) and
// implement Collector, which snapshots them into Families when /metrics is
// scraped. Nothing is registered globally and nothing is computed between
// scrapes.
package metrics

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Family is one metric name with its samples.
type Family struct {
	Name    string
	Help    string
	Type    string // "counter" or "gauge"
	Samples []Sample
}

// Sample is one value with its labels, as name/value pairs.
type Sample struct {
	Labels []string
	Value  float64
}

// Collector produces a snapshot of its metrics.
type Collector interface {
	Collect() []Family
}

// CollectorFunc adapts a function to Collector.
type CollectorFunc func() []Family

// Collect calls f.
func (f CollectorFunc) Collect() []Family { return f() }

// Write writes families in the text exposition format, sorted by name.
func Write(w io.Writer, fams []Family) error {
	sort.SliceStable(fams, func(i, j int) bool { return fams[i].Name < fams[j].Name })
	var b strings.Builder
	for _, f := range fams {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.Name, strings.ReplaceAll(f.Help, "\n", " "), f.Name, f.Type)
		for _, s := range f.Samples {
			b.WriteString(f.Name)
			if len(s.Labels) > 0 {
				b.WriteByte('{')
				for i := 0; i+1 < len(s.Labels); i += 2 {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "%s=\"%s\"", s.Labels[i], escape(s.Labels[i+1]))
				}
				b.WriteByte('}')
			}
			b.WriteByte(' ')
			b.WriteString(strconv.FormatFloat(s.Value, 'g', -1, 64))
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func escape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// Handler serves the collectors' metrics.
func Handler(cs ...Collector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var fams []Family
		for _, c := range cs {
			fams = append(fams, c.Collect()...)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = Write(w, fams)
	})
}
