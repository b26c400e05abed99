package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// BenchmarkMerge compares one script call per Decide (merge=1) with the
// calls of a pipeline's Decides merged into one (merge.go), with EVALSHA
// and with FCALL (Options.Functions), with the load
// of BenchmarkDecideParallel (one check per Decide, always admitting, 1000
// descriptors): 64 callers with the default lanes, as in production.
// Besides BenchmarkDecideParallel's figures it reports the descriptors per
// script call and the µs Redis spent in each call (INFO commandstats), the
// time one call keeps Redis from serving anyone else.
func BenchmarkMerge(b *testing.B) {
	srv := redistest.Standalone(b)
	for _, fcall := range []bool{false, true} {
		for _, rules := range [][]limit.Rule{openRules1, openRules3} {
			for _, items := range []int{1, maxMergeItems} {
				b.Run(fmt.Sprintf("callers=64/functions=%s/rules=%d/merge=%d", onOff(fcall), len(rules), items), func(b *testing.B) {
					benchMerge(b, srv, Options{URL: srv.Addr(), mergeItems: items, Functions: fcall}, rules, 64)
				})
			}
		}
	}
}

// BenchmarkMergeBound chooses maxMergeItems: pipelines as large as 256
// callers make them with one lane, merged into calls of at most merge
// descriptors. Redis's CPU per descriptor falls with the size of a call
// while its per-command cost is shared, and the time one call blocks
// Redis grows with it.
func BenchmarkMergeBound(b *testing.B) {
	srv := redistest.Standalone(b)
	for _, rules := range [][]limit.Rule{openRules1, openRules3} {
		for _, items := range []int{1, 4, 8, 16, 32, 64, 128} {
			b.Run(fmt.Sprintf("callers=256/rules=%d/merge=%d", len(rules), items), func(b *testing.B) {
				benchMerge(b, srv, Options{URL: srv.Addr(), mergeItems: items, pipelineLanes: 1, PipelineLimit: 256, Timeout: 30 * time.Second}, rules, 256)
			})
		}
	}
}

// benchMerge is benchParallel, reporting also the descriptors per script
// call (desc/call) and Redis's µs per call (usec/call).
func benchMerge(b *testing.B, srv *redistest.Server, opts Options, rules []limit.Rule, callers int) {
	rc := srv.Client()
	if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	benchParallel(b, srv, opts, rules, callers)
	calls, usec := scriptStats(b, srv)
	if calls > 0 {
		b.ReportMetric(float64(b.N)/float64(calls), "desc/call")
		b.ReportMetric(usec/float64(calls), "usec/call")
	}
}

// scriptStats returns the EVALSHA and FCALL calls and the µs they took
// since the last CONFIG RESETSTAT.
func scriptStats(b *testing.B, srv *redistest.Server) (calls int, usec float64) {
	info, err := srv.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Fields(info) {
		stat, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			if stat, ok = strings.CutPrefix(line, "cmdstat_fcall:"); !ok {
				continue
			}
		}
		for _, kv := range strings.Split(stat, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				n, _ := strconv.Atoi(v)
				calls += n
			case "usec":
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	return calls, usec
}
