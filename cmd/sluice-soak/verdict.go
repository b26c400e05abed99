package main

import (
	"fmt"
	"io"
)

// figureVerdict says whether one figure levelled off: the mean of the last
// third of the samples against the mean of the middle third (the first
// third is warm-up: pools fill, caches load, state accumulates).
type figureVerdict struct {
	name        string
	middle      float64
	last        float64
	unit        string
	levels      bool
	unavailable bool // the figure was not sampled
}

// margin is how much a figure may grow from the middle third to the last
// and still count as level: a relative part and an absolute floor, so
// that small figures (a few goroutines, a few MiB) do not fail on noise.
type margin struct {
	rel float64
	abs float64
}

var margins = map[string]margin{
	"RSS":        {rel: 0.10, abs: 4 << 20},
	"goroutines": {rel: 0.10, abs: 5},
	"Redis used": {rel: 0.10, abs: 1 << 20},
}

// verdicts judges RSS, goroutines and Redis used_memory over rows.
func verdicts(rows []row) []figureVerdict {
	get := map[string]func(row) float64{
		"RSS":        func(r row) float64 { return float64(r.rss) },
		"goroutines": func(r row) float64 { return float64(r.goroutines) },
		"Redis used": func(r row) float64 { return float64(r.redisMem) },
	}
	var out []figureVerdict
	for _, name := range []string{"RSS", "goroutines", "Redis used"} {
		v := figureVerdict{name: name}
		if name != "goroutines" {
			v.unit = "MiB"
		}
		if len(rows) < 3 || get[name](rows[0]) < 0 {
			v.unavailable, v.levels = true, true
			out = append(out, v)
			continue
		}
		third := len(rows) / 3
		v.middle = mean(rows[third:2*third], get[name])
		v.last = mean(rows[2*third:], get[name])
		m := margins[name]
		v.levels = v.last <= v.middle+max(m.rel*v.middle, m.abs)
		out = append(out, v)
	}
	return out
}

func mean(rows []row, f func(row) float64) float64 {
	s := 0.0
	for _, r := range rows {
		s += f(r)
	}
	return s / float64(len(rows))
}

// printVerdict prints one line per figure and an overall line.
func printVerdict(out io.Writer, rep *report) {
	fmt.Fprintf(out, "verdict (%s backend; mean of the last third of the samples against the middle third):\n", rep.backend)
	for _, v := range rep.verdict {
		if v.unavailable {
			why := "not sampled"
			if v.name == "goroutines" {
				why = "not sampled: this sluice binary serves neither /debug/pprof/goroutine nor a go_goroutines metric"
			}
			if v.name == "Redis used" {
				why = "no Redis"
			}
			fmt.Fprintf(out, "  %-10s  %s\n", v.name, why)
			continue
		}
		word := "levels off"
		if !v.levels {
			word = "STILL GROWING"
		}
		scale, format := 1.0, "%.0f"
		if v.unit == "MiB" {
			scale, format = 1<<20, "%.1f"
		}
		m := margins[v.name]
		fmt.Fprintf(out, "  %-10s  "+format+" -> "+format+" %s (%+.1f%%; margin %.0f%% or "+format+" %s): %s\n",
			v.name, v.middle/scale, v.last/scale, v.unit, 100*(v.last-v.middle)/max(v.middle, 1), 100*m.rel, m.abs/scale, v.unit, word)
	}
	fmt.Fprintf(out, "  failed calls: %d", rep.failed)
	if rep.stopErr != nil {
		fmt.Fprintf(out, "; stop: %v", rep.stopErr)
	} else {
		fmt.Fprint(out, "; sluice stopped cleanly on SIGTERM")
	}
	fmt.Fprintln(out)
	if rep.ok() {
		fmt.Fprintln(out, "  => OK: every sampled figure levels off")
	} else {
		fmt.Fprintln(out, "  => NOT OK")
	}
}
