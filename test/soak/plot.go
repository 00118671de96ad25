package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// plotSamples draws the samples of a CSV file (recorder's) as an SVG: RSS,
// goroutines and open fds over time, a line per replica, so that what
// "flat after warm-up" means can be seen.
func plotSamples(csvPath, svgPath string) error {
	f, err := os.Open(csvPath)
	if err != nil {
		return err
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) < 2 {
		return fmt.Errorf("%s: no samples (%v)", csvPath, err)
	}
	// series[column][replica] = points
	columns := []struct {
		col   int
		title string
	}{{3, "RSS (MiB)"}, {4, "goroutines"}, {5, "open fds"}}
	series := make([]map[string][][2]float64, len(columns))
	maxT := 0.0
	for i := range series {
		series[i] = map[string][][2]float64{}
	}
	for _, row := range rows[1:] {
		t, _ := strconv.ParseFloat(row[0], 64)
		maxT = max(maxT, t)
		for i, c := range columns {
			v, _ := strconv.ParseFloat(row[c.col], 64)
			series[i][row[2]] = append(series[i][row[2]], [2]float64{t, v})
		}
	}
	const w, h, pad = 900, 220, 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, len(columns)*(h+pad)+pad)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	for i, c := range columns {
		top := pad + i*(h+pad)
		panel(&b, c.title, series[i], maxT, pad, top, w-2*pad, h, colors)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(svgPath, []byte(b.String()), 0o644)
}

// panel draws one figure's lines in the box at (left, top).
func panel(b *strings.Builder, title string, lines map[string][][2]float64, maxT float64, left, top, w, h int, colors []string) {
	maxV := 0.0
	for _, pts := range lines {
		for _, p := range pts {
			maxV = max(maxV, p[1])
		}
	}
	maxV = niceCeil(maxV)
	maxT = max(maxT, 1)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, top-8, title)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, top, w, h)
	for k := 0; k <= 4; k++ {
		y := top + h - k*h/4
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/><text x="%d" y="%d" text-anchor="end">%g</text>`+"\n",
			left, y, left+w, y, left-4, y+4, maxV*float64(k)/4)
		x := left + k*w/4
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%.0fs</text>`+"\n", x, top+h+14, maxT*float64(k)/4)
	}
	n := 0
	for replica := 0; ; replica++ {
		pts, ok := lines[strconv.Itoa(replica)]
		if !ok {
			break
		}
		var path strings.Builder
		for _, p := range pts {
			fmt.Fprintf(&path, "%.1f,%.1f ", float64(left)+p[0]/maxT*float64(w), float64(top+h)-p[1]/maxV*float64(h))
		}
		color := colors[n%len(colors)]
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, path.String())
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">replica %d</text>`+"\n", left+w-80, top+16+14*n, color, replica)
		n++
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
