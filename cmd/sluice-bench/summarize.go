package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/loadgen"
)

// sample is one run of measure.sh: the load generator's report and the CPU
// figures the script recorded beside it (NAME.ROUND.json, NAME.ROUND.cpu.json).
type sample struct {
	round  int
	report loadgen.Report
	cpu    struct {
		Wall   float64 `json:"wall_s"`
		Server float64 `json:"server_cpu_s"`
		Redis  float64 `json:"redis_cpu_s"`
		Client float64 `json:"client_cpu_s"`
		Others float64 `json:"others_cpu_s"`
		// RedisCalls is the script calls Redis ran during the run.
		RedisCalls float64 `json:"redis_script_calls"`
		// RedisUsec and RedisCommands are what INFO commandstats counted
		// for the data commands of the run (reset before it): the usec
		// Redis spent in them, and how many there were.
		RedisUsec     float64 `json:"redis_usec"`
		RedisCommands float64 `json:"redis_commands"`
		// RedisMemory and RedisKeys are used_memory and DBSIZE at the end.
		RedisMemory float64 `json:"redis_used_memory"`
		RedisKeys   float64 `json:"redis_keys"`
	}
}

// summarize prints a markdown table of the runs in one or more measure.sh
// output directories (several: rounds measured separately, merged in the
// order given): per target the median throughput, its ratio to the no-op
// median, the median p99, and every run with the CPU the server, Redis,
// the load generator and the machine's other processes used.
func summarize(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice-bench summarize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() == 0 {
		return errors.New("want one or more directories (measure.sh's OUTDIR)")
	}
	runs := make(map[string][]sample)
	var order []string
	for _, dir := range fs.Args() {
		more, names, err := readRuns(dir)
		if err != nil {
			return err
		}
		for _, name := range names {
			if _, seen := runs[name]; !seen {
				order = append(order, name)
			}
			runs[name] = append(runs[name], more[name]...)
		}
	}
	sortTargets(order)
	noop := 0.0
	if s := runs["noop"]; len(s) > 0 {
		noop = median(s, func(s sample) float64 { return s.report.Throughput })
	}
	fmt.Fprintln(stdout, "| target | median req/s | vs no-op | median p99 ms | server µs CPU/call | redis µs CPU/call | Redis calls/call | attack denials answered locally | runs: req/s (p99 ms) [CPU cores: server / redis / client / others] |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, name := range order {
		ss := runs[name]
		tput := median(ss, func(s sample) float64 { return s.report.Throughput })
		p99 := median(ss, func(s sample) float64 { return s.report.Latency.P99 })
		ratio := "—"
		if noop > 0 && name != "noop" {
			ratio = fmt.Sprintf("%.0f%%", 100*tput/noop)
		}
		perCall := func(cpu func(sample) float64) float64 {
			return median(ss, func(s sample) float64 {
				if s.report.CallsTotal == 0 {
					return 0
				}
				return 1e6 * cpu(s) / float64(s.report.CallsTotal)
			})
		}
		server := perCall(func(s sample) float64 { return s.cpu.Server })
		redis := perCall(func(s sample) float64 { return s.cpu.Redis })
		calls := perCall(func(s sample) float64 { return s.cpu.RedisCalls }) / 1e6
		local := "—"
		if ss[0].report.AttackKeys > 0 && calls > 0 {
			local = fmt.Sprintf("%.1f%%", 100*median(ss, localShare))
		}
		var each []string
		for _, s := range ss {
			w := s.cpu.Wall
			if w <= 0 {
				w = 1
			}
			each = append(each, fmt.Sprintf("%.0f (%.2f) [%.2f / %.2f / %.2f / %.2f]", s.report.Throughput, s.report.Latency.P99,
				s.cpu.Server/w, s.cpu.Redis/w, s.cpu.Client/w, s.cpu.Others/w))
		}
		fmt.Fprintf(stdout, "| %s | %.0f | %s | %.2f | %.1f | %.1f | %.3f | %s | %s |\n", name, tput, ratio, p99, server, redis, calls, local, strings.Join(each, "; "))
	}
	redisTable(stdout, order, runs)
	return nil
}

// redisTable prints, for the targets that used Redis, Redis's own figures
// per decision (one descriptor decided): the command time INFO
// commandstats counted, the commands, and the service's CPU, then the
// latency percentiles and what Redis held at the end of the run.
func redisTable(stdout io.Writer, order []string, runs map[string][]sample) {
	if !slices.ContainsFunc(order, func(name string) bool {
		return median(runs[name], func(s sample) float64 { return s.cpu.RedisCommands }) > 0
	}) {
		return // runs of an older measure.sh, or none on Redis
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| target | descriptors/request | Redis µs/decision (commandstats) | Redis commands/decision | server µs CPU/decision | p50 / p99 / p999 ms | keys at end | used_memory MB at end |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---|---:|---:|")
	for _, name := range order {
		ss := runs[name]
		if median(ss, func(s sample) float64 { return s.cpu.RedisCommands }) == 0 {
			continue
		}
		per := func(f func(sample) float64) float64 {
			return median(ss, func(s sample) float64 {
				d := float64(s.report.CallsTotal) * float64(max(1, len(s.report.Descriptors)))
				if d == 0 {
					return 0
				}
				return f(s) / d
			})
		}
		fmt.Fprintf(stdout, "| %s | %d | %.2f | %.2f | %.1f | %.2f / %.2f / %.2f | %.0f | %.1f |\n", name, max(1, len(ss[0].report.Descriptors)),
			per(func(s sample) float64 { return s.cpu.RedisUsec }),
			per(func(s sample) float64 { return s.cpu.RedisCommands }),
			per(func(s sample) float64 { return 1e6 * s.cpu.Server }),
			median(ss, func(s sample) float64 { return s.report.Latency.P50 }),
			median(ss, func(s sample) float64 { return s.report.Latency.P99 }),
			median(ss, func(s sample) float64 { return s.report.Latency.P999 }),
			median(ss, func(s sample) float64 { return s.cpu.RedisKeys }),
			median(ss, func(s sample) float64 { return s.cpu.RedisMemory })/1e6)
	}
}

// readRuns reads NAME.ROUND.json and NAME.ROUND.cpu.json files, returning
// the samples by name (sorted by round) and the names in first-seen order
// of their first round.
func readRuns(dir string) (map[string][]sample, []string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.*.json"))
	if err != nil {
		return nil, nil, err
	}
	runs := make(map[string][]sample)
	var order []string
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".json")
		name, roundText, ok := strings.Cut(base, ".")
		if !ok || strings.Contains(roundText, ".") {
			continue // NAME.ROUND.cpu.json, read below
		}
		round, err := strconv.Atoi(roundText)
		if err != nil {
			continue
		}
		s := sample{round: round}
		if err := readJSON(f, &s.report); err != nil {
			return nil, nil, err
		}
		if err := readJSON(filepath.Join(dir, base+".cpu.json"), &s.cpu); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		if _, seen := runs[name]; !seen {
			order = append(order, name)
		}
		runs[name] = append(runs[name], s)
	}
	for _, ss := range runs {
		slices.SortFunc(ss, func(a, b sample) int { return a.round - b.round })
	}
	sortTargets(order)
	if len(order) == 0 {
		return nil, nil, fmt.Errorf("no NAME.ROUND.json runs in %s", dir)
	}
	return runs, order, nil
}

// sortTargets orders target names as measure.sh runs them, others after
// them by name.
func sortTargets(order []string) {
	rank := map[string]int{"noop": 0, "memory": 1, "redis1": 2, "inc1": 3, "redis3": 4, "redis3fw": 5, "redis3d": 6, "inc3": 7, "attack": 8, "incattack": 9}
	slices.SortStableFunc(order, func(a, b string) int {
		ra, oka := rank[a]
		rb, okb := rank[b]
		switch {
		case oka && okb:
			return ra - rb
		case oka:
			return -1
		case okb:
			return 1
		}
		return strings.Compare(a, b)
	})
}

// localShare estimates the share of attack denials answered without
// Redis. Every normal call reaches Redis (the normal keys stay under their
// limit), and so does every admitted attack call; the script calls left
// over are attack denials Redis decided. The measured phase's split is
// scaled to every call of the run, since Redis's count covers the warm-up.
func localShare(s sample) float64 {
	r := s.report
	if r.Requests == 0 || r.Attack.OverLimit == 0 {
		return 0
	}
	scale := float64(r.CallsTotal) / float64(r.Requests)
	normal := scale * float64(r.Normal.Requests)
	admitted := scale * float64(r.Attack.Requests-r.Attack.OverLimit)
	denied := scale * float64(r.Attack.OverLimit)
	remote := s.cpu.RedisCalls - normal - admitted
	return min(1, max(0, 1-remote/denied))
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// median of f over ss (the mean of the middle two for an even count).
func median(ss []sample, f func(sample) float64) float64 {
	if len(ss) == 0 {
		return 0
	}
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}
