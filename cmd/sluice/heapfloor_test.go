package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	"github.com/sluice-rl/sluice/internal/heapfloor"
)

func TestGCHeapFloorSetting(t *testing.T) {
	checkIntSetting(t, "SLUICE_GC_HEAP_FLOOR_BYTES", func(s *settings) int { return s.GCHeapFloor },
		[]intSettingCase{{"", 64 << 20, false}, {"0", 0, false}, {"268435456", 256 << 20, false}, {"-1", 0, true}, {"1099511627777", 0, true}})
}

func TestGOGC(t *testing.T) {
	for _, tc := range []struct {
		environ []string
		want    int
	}{
		{nil, 100},
		{[]string{"GOGCX=5"}, 100},
		{[]string{"GOGC=off"}, -1},
		{[]string{"GOGC=250"}, 250},
		{[]string{"GOGC=lots"}, 100},
		{[]string{"GOGC=50", "GOGC=400"}, 50},
	} {
		if got := gogc(tc.environ); got != tc.want {
			t.Errorf("gogc(%q) = %d, want %d", tc.environ, got, tc.want)
		}
	}
}

// TestServeLiftsTheGCGoal runs `sluice serve` in process (whose GC is this
// test process's) and reads the GC percentage it exposes at /metrics
// (go_gc_gogc_percent): lifted above GOGC while the heap is under the
// floor, GOGC's when the floor is 0 or GOGC=off, and GOGC's again after
// the service stops.
func TestServeLiftsTheGCGoal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		lifted bool
	}{
		{"default floor", nil, true},
		{"GOGC set: the floor applies above it", []string{"GOGC=150"}, true},
		{"floor 0", []string{"SLUICE_GC_HEAP_FLOOR_BYTES=0"}, false},
		{"GOGC=off", []string{"GOGC=off"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeConfig(t, dir, "api.yaml", namedYearly("api", "20"))
			s := startServe(t, append([]string{"SLUICE_CONFIG=" + dir}, tc.env...))
			percent := func() float64 {
				return s.scrapeMetrics(t)["go_gc_gogc_percent"].GetMetric()[0].GetGauge().GetValue()
			}
			if tc.lifted {
				// Lifted, and following the live heap each cycle finds
				// (not stuck where it was set at start).
				waitFor(t, "the GC percentage to be lifted for the live heap", func() bool {
					runtime.GC()
					p := percent()
					return p > 150 && int(p) == heapfloor.Percent(liveHeapNow(), defaultGCHeapFloor, gogc(tc.env))
				})
			} else {
				for range 3 {
					runtime.GC()
				}
				if p := percent(); p != 100 {
					t.Errorf("GC percent %v, want the test process's 100", p)
				}
			}
			if code := s.stop(t); code != 0 {
				t.Fatalf("serve exited %d", code)
			}
			// Stop puts back the percentage serve started from: GOGC's as
			// serve read it (this process's own GC stays at 100 otherwise).
			base := gogc(tc.env)
			defer debug.SetGCPercent(100)
			if p := gcPercentNow(); base >= 0 && p != base {
				t.Errorf("after serve stopped: GC percent %d, want %d back", p, base)
			}
		})
	}
}

// liveHeapNow reads the live heap the last GC cycle found.
func liveHeapNow() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// gcPercentNow reads this process's GC percentage.
func gcPercentNow() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
