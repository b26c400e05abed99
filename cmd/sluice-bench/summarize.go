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

// sample is one run of measure.sh: the load generator's report
// (NAME.ROUND.json), the CPU figures the script recorded beside it
// (NAME.ROUND.cpu.json) and what Redis reported at the start and the end of
// the run (NAME.ROUND.redis-start.txt, NAME.ROUND.redis.txt).
type sample struct {
	round      int
	report     loadgen.Report
	cpu        cpuFigures
	redis      redisFigures
	redisStart redisFigures
	// stages is the service's CPU by stage (shares summing to 1), from
	// NAME.ROUND.pprof when measure.sh ran with PROFILE.
	stages map[string]float64
	// commands is the calls of each data command INFO commandstats
	// counted over the run (every node; commands scripts ran included).
	commands map[string]float64
	// metrics is sluice's /metrics at the end of the run
	// (NAME.ROUND.metrics.txt), "" when absent.
	metrics string
}

// cpuFigures is NAME.ROUND.cpu.json: CPU seconds over the load generator's
// lifetime (warm-up included) of each process.
type cpuFigures struct {
	Wall    float64 `json:"wall_s"`
	Server  float64 `json:"server_cpu_s"`
	Redis   float64 `json:"redis_cpu_s"`
	Client  float64 `json:"client_cpu_s"`
	Others  float64 `json:"others_cpu_s"`
	Loadavg float64 `json:"loadavg_before"`
	// ServerSyscalls and RedisSyscalls are the read and write system calls
	// of the server and of redis-server (every node) over the same span;
	// nil in runs recorded before measure.sh counted them.
	ServerSyscalls *float64 `json:"server_syscalls"`
	RedisSyscalls  *float64 `json:"redis_syscalls"`
	// ServerPeakRSS is the server's peak resident memory in bytes (VmHWM
	// of /proc/PID/status at the end of the run); nil in runs recorded
	// before measure.sh read it.
	ServerPeakRSS *float64 `json:"server_peak_rss_bytes"`
	// The Redis figures of runs recorded before measure.sh kept Redis's
	// own INFO output (read when NAME.ROUND.redis.txt is absent).
	RedisCalls    float64 `json:"redis_script_calls"`
	RedisUsec     float64 `json:"redis_usec"`
	RedisCommands float64 `json:"redis_commands"`
	RedisMemory   float64 `json:"redis_used_memory"`
	RedisKeys     float64 `json:"redis_keys"`
}

// descriptors is how many descriptors each request of s carried.
func (s sample) descriptors() float64 { return float64(max(1, len(s.report.Descriptors))) }

// perRequest is x spread over every call of the run, in millionths (µs
// for CPU seconds).
func (s sample) perRequest(x float64) float64 {
	if s.report.CallsTotal == 0 {
		return 0
	}
	return 1e6 * x / float64(s.report.CallsTotal)
}

// perDecision is x spread over every descriptor decided (calls ×
// descriptors per call).
func (s sample) perDecision(x float64) float64 {
	return s.perRequest(x) / 1e6 / s.descriptors()
}

// bytesPerDescriptor is the Redis memory the run added, per descriptor
// the load made active (keys, attack keys included, × descriptors per
// request).
func (s sample) bytesPerDescriptor() float64 {
	active := float64(s.report.Keys+s.report.AttackKeys) * s.descriptors()
	if active == 0 {
		return 0
	}
	return (s.redis.Memory - s.redisStart.Memory) / active
}

// summarize prints the tables of docs/benchmarks.md from one or more
// measure.sh output directories (several: rounds measured separately,
// merged in the order given), each block between the markers the doc
// holds it in; with --doc FILE it replaces those blocks in FILE instead
// (repeatable: docs/benchmarks.md and README.md), and with --only NAMES it
// prints only the named blocks. --keep-unmeasured, with --doc, leaves the
// blocks whose targets the run did not measure as the doc has them,
// instead of writing that they were not measured: for a run of some
// targets only, whose doc must then say which blocks came from which run.
func summarize(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice-bench summarize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var docs repeated
	fs.Var(&docs, "doc", "replace the generated blocks of this markdown file in place (repeatable)")
	only := fs.String("only", "", "comma-separated blocks to print (default: every block)")
	keep := fs.Bool("keep-unmeasured", false, "with --doc: leave the blocks this run did not measure as they are")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() == 0 {
		return errors.New("want one or more directories (measure.sh's OUTDIR)")
	}
	rs, err := readRunSet(fs.Args(), stderr)
	if err != nil {
		return err
	}
	blocks := rs.blocks()
	if *keep {
		if len(docs) == 0 {
			return errors.New("--keep-unmeasured: only with --doc")
		}
		for i := range blocks {
			blocks[i].keep = blocks[i].text == notMeasured
		}
	}
	if len(docs) > 0 {
		for _, doc := range docs {
			if err := updateDoc(doc, blocks); err != nil {
				return err
			}
		}
		return nil
	}
	var want map[string]bool
	if *only != "" {
		want = make(map[string]bool)
		for _, name := range strings.Split(*only, ",") {
			if !slices.ContainsFunc(blocks, func(b block) bool { return b.name == name }) {
				return fmt.Errorf("--only: no block %q", name)
			}
			want[name] = true
		}
	}
	for _, b := range blocks {
		if want == nil || want[b.name] {
			fmt.Fprintf(stdout, "%s\n%s%s\n\n", startMarker(b.name), b.text, endMarker)
		}
	}
	return nil
}

// readRunSet reads every directory's runs, merging runs of the same name.
func readRunSet(dirs []string, warn io.Writer) (*runSet, error) {
	rs := &runSet{runs: make(map[string][]sample)}
	for _, dir := range dirs {
		more, names, err := readRuns(dir, warn)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if _, seen := rs.runs[name]; !seen {
				rs.order = append(rs.order, name)
			}
			rs.runs[name] = append(rs.runs[name], more[name]...)
		}
		var m machineInfo
		switch err := readJSON(filepath.Join(dir, "machine.json"), &m); {
		case err == nil:
			if rs.machine == nil {
				rs.machine = &m
			}
			rs.rounds = append(rs.rounds, m.Rounds)
		case !errors.Is(err, os.ErrNotExist):
			return nil, err
		}
		var e struct {
			Elapsed float64 `json:"elapsed_s"`
		}
		if err := readJSON(filepath.Join(dir, "elapsed.json"), &e); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		rs.elapsed += e.Elapsed
	}
	sortTargets(rs.order)
	return rs, nil
}

// runsTable prints every target's median throughput, its ratio to the
// no-op median, the median p99, and every run with the CPU the server,
// Redis, the load generator and the machine's other processes used.
func (rs *runSet) runsTable(w io.Writer) {
	fmt.Fprintln(w, "| target | median req/s | vs no-op | median p99 ms | server µs CPU/call | redis µs CPU/call | Redis calls/call | attack denials answered locally | server peak RSS MB | runs: req/s (p99 ms) [CPU cores: server / redis / client / others] |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, name := range rs.order {
		ss := rs.runs[name]
		tput := median(ss, throughput)
		rss := "—"
		if withRSS := slices.DeleteFunc(slices.Clone(ss), func(s sample) bool { return s.cpu.ServerPeakRSS == nil }); len(withRSS) > 0 {
			rss = fmt.Sprintf("%.0f", median(withRSS, func(s sample) float64 { return *s.cpu.ServerPeakRSS / 1e6 }))
		}
		ratio := "—"
		if noop := rs.med(noopFor(name), throughput); noop > 0 && base(name) != "noop" {
			ratio = fmt.Sprintf("%.0f%%", 100*tput/noop)
		}
		calls := median(ss, func(s sample) float64 { return s.perRequest(s.redis.Scripts) }) / 1e6
		local := "—"
		if share := median(ss, localShare); ss[0].report.AttackKeys > 0 && calls > 0 && share >= 0 {
			local = fmt.Sprintf("%.1f%%", 100*share)
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
		fmt.Fprintf(w, "| %s | %.0f | %s | %.2f | %.1f | %.1f | %.3f | %s | %s | %s |\n", name, tput, ratio, median(ss, p99),
			median(ss, serverCPU), median(ss, redisCPU), calls, local, rss, strings.Join(each, "; "))
	}
}

// readRuns reads NAME.ROUND.json and the files beside it, returning the
// samples by name (sorted by round) and the names in target order. A run
// whose report does not parse and that has no CPU file yet (measure.sh
// writes it last) was cut short or is still going: it is left out, and
// said so on warn.
func readRuns(dir string, warn io.Writer) (map[string][]sample, []string, error) {
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
			continue // NAME.ROUND.cpu.json, read by readSample
		}
		round, err := strconv.Atoi(roundText)
		if err != nil {
			continue
		}
		s, err := readSample(filepath.Join(dir, base), round)
		if err != nil {
			if _, cpuErr := os.Stat(filepath.Join(dir, base+".cpu.json")); errors.Is(cpuErr, os.ErrNotExist) {
				fmt.Fprintf(warn, "sluice-bench summarize: leaving out %s, an unfinished run (%v)\n", f, err)
				continue
			}
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

// readSample reads one run's files, PREFIX being OUTDIR/NAME.ROUND: the
// report, and when they exist the CPU file, Redis's INFO, sluice's metrics
// and the service's CPU profile.
func readSample(prefix string, round int) (sample, error) {
	s := sample{round: round}
	if err := readJSON(prefix+".json", &s.report); err != nil {
		return s, err
	}
	if err := readJSON(prefix+".cpu.json", &s.cpu); err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	if err := readRedis(prefix, &s); err != nil {
		return s, err
	}
	switch data, err := os.ReadFile(prefix + ".metrics.txt"); {
	case err == nil:
		s.metrics = string(data)
	case !errors.Is(err, os.ErrNotExist):
		return s, err
	}
	switch data, err := os.ReadFile(prefix + ".pprof"); {
	case err == nil:
		if s.stages, err = stageShares(data); err != nil {
			return s, fmt.Errorf("%s.pprof: %w", prefix, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return s, err
	}
	return s, nil
}

// readRedis reads PREFIX.redis-start.txt and PREFIX.redis.txt into s, or,
// when they are absent, the Redis figures of the CPU file.
func readRedis(prefix string, s *sample) error {
	for _, f := range []struct {
		path string
		dst  *redisFigures
	}{{prefix + ".redis-start.txt", &s.redisStart}, {prefix + ".redis.txt", &s.redis}} {
		data, err := os.ReadFile(f.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if *f.dst, err = parseRedisInfo(string(data)); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		if f.dst == &s.redis {
			if s.commands, err = commandCalls(string(data)); err != nil {
				return fmt.Errorf("%s: %w", f.path, err)
			}
		}
	}
	if s.redis.Nodes == 0 {
		c := s.cpu
		s.redis = redisFigures{Usec: c.RedisUsec, Commands: c.RedisCommands, Scripts: c.RedisCalls, Memory: c.RedisMemory, Keys: c.RedisKeys}
	}
	return nil
}

// targetOrder is the order of measure.sh's targets in the tables.
var targetOrder = []string{"noop", "noopredis", "memory", "redis1", "inc1", "redis3", "redis3fw", "redis6fw", "redis3d", "inc3",
	"redis5d", "inc5", "redis10d", "inc10", "attack", "incattack", "redis1cl", "inc1cl", "redis3dcl", "inc3cl", "redis1nc", "redis1nm", "redis1ev", "memorynw", "attacknc", "redis1dw", "redis1gf"}

// sortTargets orders target names as measure.sh runs them (a target at
// another concurrency after it, by concurrency), others after them by name.
func sortTargets(order []string) {
	key := func(name string) (int, int) {
		r := slices.Index(targetOrder, base(name))
		if r < 0 {
			r = len(targetOrder)
		}
		return r, concurrency(name)
	}
	slices.SortStableFunc(order, func(a, b string) int {
		ra, ca := key(a)
		rb, cb := key(b)
		if ra != rb {
			return ra - rb
		}
		if ca != cb {
			return ca - cb
		}
		return strings.Compare(a, b)
	})
}

// base is a target's name without its concurrency suffix (-cN).
func base(name string) string {
	if i := strings.LastIndex(name, "-c"); i > 0 {
		if _, err := strconv.Atoi(name[i+2:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// concurrency is a target's -cN suffix, 0 without one.
func concurrency(name string) int {
	if b := base(name); b != name {
		n, _ := strconv.Atoi(name[len(b)+2:])
		return n
	}
	return 0
}

// noopFor is the no-op target measured at the same concurrency as name.
func noopFor(name string) string { return "noop" + name[len(base(name)):] }

// incumbentFor is the incumbent's target measured on the same load as
// sluice's target name, "" if none.
func incumbentFor(name string) string {
	inc := map[string]string{"redis1": "inc1", "redis3": "inc3", "redis3fw": "inc3", "redis3d": "inc3",
		"redis5d": "inc5", "redis10d": "inc10", "attack": "incattack", "redis1cl": "inc1cl", "redis3dcl": "inc3cl"}[base(name)]
	if inc == "" {
		return ""
	}
	return inc + name[len(base(name)):]
}

// localShare is the share of denials answered without Redis: sluice's
// denial cache hits over its over-limit decisions, both counted over the
// whole run. Runs without sluice's metrics estimate it from Redis's script
// calls, which is right only when each call decides one descriptor: every
// normal call reaches Redis (the normal keys stay under their limit), and
// so does every admitted attack call; the script calls left over are
// attack denials Redis decided. The measured phase's split is scaled to
// every call of the run, since Redis's count covers the warm-up. It is -1
// when that estimate cannot hold (fewer script calls than admitted
// descriptors: calls that decided several).
func localShare(s sample) float64 {
	if s.metrics != "" {
		hits, err1 := metricSum(s.metrics, "sluice_denycache_hits_total")
		denied, err2 := metricSum(s.metrics, "sluice_decisions_total", `outcome="over_limit"`)
		if err1 != nil || err2 != nil || denied == 0 {
			return 0
		}
		return min(1, hits/denied)
	}
	r := s.report
	if r.Requests == 0 || r.Attack.OverLimit == 0 {
		return 0
	}
	scale := float64(r.CallsTotal) / float64(r.Requests)
	normal := scale * float64(r.Normal.Requests)
	admitted := scale * float64(r.Attack.Requests-r.Attack.OverLimit)
	denied := scale * float64(r.Attack.OverLimit)
	remote := s.redis.Scripts - normal - admitted
	if remote < 0 {
		return -1
	}
	return min(1, 1-remote/denied)
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
