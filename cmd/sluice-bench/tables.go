package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runSet is every run of one measurement, by target name.
type runSet struct {
	runs    map[string][]sample
	order   []string
	machine *machineInfo
	// elapsed is the seconds measure.sh took, summed over the directories.
	elapsed float64
	// rounds is the rounds of every directory's run (machine.json), in
	// the order given: more than one when runs of the command are merged.
	rounds []int
}

// machineInfo is measure.sh's machine.json.
type machineInfo struct {
	Date     string `json:"date"`
	Nproc    int    `json:"nproc"`
	CPUModel string `json:"cpu_model"`
	MemGB    int    `json:"mem_gb"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Redis    string `json:"redis"`
	Rounds   int    `json:"rounds"`
	Duration string `json:"duration"`
	Warmup   string `json:"warmup"`
	C        int    `json:"c"`
	Keys     int    `json:"keys"`
	Targets  string `json:"targets"`
	// TargetsEnv is TARGETS as given ("" for every group).
	TargetsEnv string `json:"targets_env"`
	// Profile is PROFILE: the seconds of each service's CPU profile.
	Profile   string `json:"profile"`
	SluiceEnv string `json:"sluice_env"`
	Incumbent bool   `json:"incumbent"`
}

// The figures of one run that the tables take medians of.
func throughput(s sample) float64 { return s.report.Throughput }
func p99(s sample) float64        { return s.report.Latency.P99 }
func serverCPU(s sample) float64  { return s.perRequest(s.cpu.Server) }
func redisCPU(s sample) float64   { return s.perRequest(s.cpu.Redis) }
func clientCPU(s sample) float64  { return s.perRequest(s.cpu.Client) }
func bothCPU(s sample) float64    { return s.perRequest(s.cpu.Server + s.cpu.Redis) }
func redisUsec(s sample) float64  { return s.perDecision(s.redis.Usec) }

// redisUsecPerRequest is the time inside Redis commands per request (every
// descriptor of it).
func redisUsecPerRequest(s sample) float64 { return s.perRequest(s.redis.Usec) / 1e6 }

// has reports whether name was measured.
func (rs *runSet) has(name string) bool { return len(rs.runs[name]) > 0 }

// med is the median of f over name's runs, 0 if it was not measured.
func (rs *runSet) med(name string, f func(sample) float64) float64 { return median(rs.runs[name], f) }

// onRedis reports whether name's runs sent Redis commands.
func (rs *runSet) onRedis(name string) bool {
	return rs.med(name, func(s sample) float64 { return s.redis.Commands }) > 0
}

// ratio formats a / b as "1.23×", or "—" when either is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// share formats a / b as a percentage, or "—".
func share(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}

// thousands formats v rounded, with a comma every three digits.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// row is one line of a scenario table: a label and the target it shows.
type row struct{ label, name string }

// block is one generated piece of docs/benchmarks.md. keep, when set,
// leaves the doc's text of the block as it is (see replaceBlocks).
type block struct {
	name, text string
	keep       bool
}

// notMeasured stands for a table whose targets this run did not measure.
const notMeasured = "Not measured in this run.\n"

// blocks renders every generated block, in the doc's order.
func (rs *runSet) blocks() []block {
	var out []block
	add := func(name string, render func(w io.Writer) bool) {
		var b bytes.Buffer
		if !render(&b) {
			b.Reset()
			b.WriteString(notMeasured)
		}
		out = append(out, block{name: name, text: b.String()})
	}
	add("machine", rs.machineBlock)
	add("summary", rs.summaryTable)
	add("goals", rs.goalsTable)
	add("one-limit", func(w io.Writer) bool {
		return rs.scenarioTable(w, []row{{"no-op gRPC server: answers OK, does nothing (the ceiling)", "noop"},
			{roundTripLabel, "noopredis"},
			{"sluice, embedded backend (no Redis)", "memory"}, {"sluice on Redis", "redis1"}, {"incumbent on Redis", "inc1"}})
	})
	add("three-limits", func(w io.Writer) bool {
		return rs.scenarioTable(w, []row{{"sluice, 3 rules of 3 algorithms on 1 descriptor", "redis3"},
			{"sluice, 3 fixed-window rules on 1 descriptor", "redis3fw"},
			{"sluice on the incumbent's config: 3 descriptors", "redis3d"}, {"incumbent, 3 descriptors", "inc3"}})
	})
	add("attack", rs.attackTable)
	add("concurrency", rs.concurrencyTable)
	add("cluster", rs.clusterTable)
	add("redis-cpu", rs.redisCPUTable)
	add("rules", rs.rulesTable)
	add("descriptors", rs.descriptorsTable)
	add("defaults", rs.defaultsTable)
	add("time", rs.timeTable)
	add("stages", rs.stagesTable)
	add("syscalls", rs.syscallsTable)
	add("service-memory", rs.serviceMemoryTable)
	add("runs", func(w io.Writer) bool {
		rs.runsTable(w)
		return len(rs.order) > 0
	})
	return out
}

// scenarioHeader is the header of every scenario table.
const scenarioHeader = "| | target | req/s | vs no-op | vs incumbent | p50 / p99 / p999 ms | CPU µs per request: service / Redis / load generator | Redis µs per decision, in commands | Redis commands per decision | Redis keys at the end | Redis bytes per active descriptor |\n" +
	"|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|\n"

// scenarioTable prints the rows that were measured, and reports whether
// there were any.
func (rs *runSet) scenarioTable(w io.Writer, rows []row) bool {
	wrote := false
	for _, r := range rows {
		if !rs.has(r.name) {
			continue
		}
		if !wrote {
			io.WriteString(w, scenarioHeader)
			wrote = true
		}
		ss := rs.runs[r.name]
		tput := median(ss, throughput)
		vsNoop, vsInc := "—", "—"
		if base(r.name) != "noop" {
			vsNoop = share(tput, rs.med(noopFor(r.name), throughput))
		}
		if inc := incumbentFor(r.name); inc != "" {
			vsInc = ratio(tput, rs.med(inc, throughput))
		}
		cpu := fmt.Sprintf("%.1f / %.1f / %.1f", median(ss, serverCPU), median(ss, redisCPU), median(ss, clientCPU))
		usec, cmds, keys, bytes := "—", "—", "—", "—"
		if rs.onRedis(r.name) {
			usec = fmt.Sprintf("%.2f", median(ss, redisUsec))
			cmds = fmt.Sprintf("%.2f", median(ss, func(s sample) float64 { return s.perDecision(s.redis.Commands) }))
			keys = thousands(median(ss, func(s sample) float64 { return s.redis.Keys }))
			bytes = thousands(median(ss, sample.bytesPerDescriptor))
		} else {
			cpu = fmt.Sprintf("%.1f / — / %.1f", median(ss, serverCPU), median(ss, clientCPU))
		}
		l := func(f func(s sample) float64) float64 { return median(ss, f) }
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %.2f / %.2f / %.2f | %s | %s | %s | %s | %s |\n", r.label, r.name,
			thousands(tput), vsNoop, vsInc,
			l(func(s sample) float64 { return s.report.Latency.P50 }), l(p99), l(func(s sample) float64 { return s.report.Latency.P999 }),
			cpu, usec, cmds, keys, bytes)
	}
	return wrote
}

// attackTable is the attack mix's scenario table and the share of denials
// the local cache answered.
func (rs *runSet) attackTable(w io.Writer) bool {
	if !rs.scenarioTable(w, []row{{"sluice, 30% of requests on 4 hot keys", "attack"}, {"incumbent, same load", "incattack"}}) {
		return false
	}
	if share := rs.med("attack", localShare); rs.has("attack") && share >= 0 {
		fmt.Fprintf(w, "\nsluice answered %.1f%% of the attack's denials from its local denial cache, without Redis.\n", 100*share)
	}
	return true
}

// concurrencyTable shows throughput and latency by the number of callers,
// for the no-op ceiling, the round-trip reference, sluice on Redis and the
// incumbent.
func (rs *runSet) concurrencyTable(w io.Writer) bool {
	byC := make(map[int]map[string]string) // callers -> base -> target name
	for _, name := range rs.order {
		b := base(name)
		if b != "noop" && b != "noopredis" && b != "redis1" && b != "inc1" {
			continue
		}
		c := int(rs.med(name, func(s sample) float64 { return float64(s.report.Workers) }))
		if byC[c] == nil {
			byC[c] = make(map[string]string)
		}
		byC[c][b] = name
	}
	var cs []int
	for c, m := range byC {
		if m["redis1"] != "" || m["inc1"] != "" {
			cs = append(cs, c)
		}
	}
	if len(cs) < 2 {
		return false
	}
	slices.Sort(cs)
	fmt.Fprintln(w, "| callers | no-op req/s | round-trip reference req/s | sluice req/s | incumbent req/s | sluice vs no-op | sluice vs reference | sluice ÷ incumbent | p99 ms: no-op / reference / sluice / incumbent | service + Redis CPU µs per request: sluice / incumbent |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
	for _, c := range cs {
		m := byC[c]
		tput := func(b string) float64 { return rs.med(m[b], throughput) }
		num := func(b string, f func(sample) float64, format string) string {
			if !rs.has(m[b]) {
				return "—"
			}
			return fmt.Sprintf(format, rs.med(m[b], f))
		}
		count := func(b string) string {
			if !rs.has(m[b]) {
				return "—"
			}
			return thousands(tput(b))
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s / %s | %s / %s |\n", c, count("noop"), count("noopredis"), count("redis1"), count("inc1"),
			share(tput("redis1"), tput("noop")), share(tput("redis1"), tput("noopredis")), ratio(tput("redis1"), tput("inc1")),
			num("noop", p99, "%.2f"), num("noopredis", p99, "%.2f"), num("redis1", p99, "%.2f"), num("inc1", p99, "%.2f"),
			num("redis1", bothCPU, "%.1f"), num("inc1", bothCPU, "%.1f"))
	}
	return true
}

// clusterTable compares one Redis with a 3-master cluster.
func (rs *runSet) clusterTable(w io.Writer) bool {
	if !rs.has("redis1cl") && !rs.has("inc1cl") {
		return false
	}
	rs.scenarioTable(w, []row{{"sluice, one Redis", "redis1"}, {"sluice, Redis Cluster of 3 masters", "redis1cl"},
		{"incumbent, one Redis", "inc1"}, {"incumbent, Redis Cluster of 3 masters", "inc1cl"},
		{"sluice, 3 descriptors, one Redis", "redis3d"}, {"sluice, 3 descriptors, Redis Cluster of 3 masters", "redis3dcl"},
		{"incumbent, 3 descriptors, one Redis", "inc3"}, {"incumbent, 3 descriptors, Redis Cluster of 3 masters", "inc3cl"}})
	fmt.Fprintf(w, "\n3 masters ÷ one Redis, req/s: sluice %s, incumbent %s. The Redis CPU column is the sum over the masters.\n",
		ratio(rs.med("redis1cl", throughput), rs.med("redis1", throughput)), ratio(rs.med("inc1cl", throughput), rs.med("inc1", throughput)))
	return true
}

// rulesTable shows the cost of further rules on one descriptor.
func (rs *runSet) rulesTable(w io.Writer) bool {
	rows := []row{{"sluice, 1 fixed-window rule", "redis1"}, {"sluice, 3 fixed-window rules", "redis3fw"}, {"sluice, 6 fixed-window rules", "redis6fw"}}
	if !rs.has("redis6fw") || !rs.scenarioTable(w, rows) {
		return false
	}
	rs.growth(w, "fixed-window rule", "redis1", "redis6fw", 5)
	return true
}

// descriptorsTable shows the cost of further descriptors per request, for
// sluice and the incumbent.
func (rs *runSet) descriptorsTable(w io.Writer) bool {
	rows := []row{{"sluice, 1 descriptor", "redis1"}, {"incumbent, 1 descriptor", "inc1"}, {"sluice, 3 descriptors", "redis3d"},
		{"incumbent, 3 descriptors", "inc3"}, {"sluice, 5 descriptors", "redis5d"}, {"incumbent, 5 descriptors", "inc5"},
		{"sluice, 10 descriptors", "redis10d"}, {"incumbent, 10 descriptors", "inc10"}}
	if (!rs.has("redis10d") && !rs.has("inc10")) || !rs.scenarioTable(w, rows) {
		return false
	}
	rs.growth(w, "descriptor (sluice)", "redis1", "redis10d", 9)
	rs.growth(w, "descriptor (incumbent)", "inc1", "inc10", 9)
	return true
}

// growth prints what each of n further units (rules, descriptors) costs
// per request, from target from to target to.
func (rs *runSet) growth(w io.Writer, unit, from, to string, n float64) {
	if !rs.has(from) || !rs.has(to) {
		return
	}
	d := func(f func(sample) float64) float64 { return (rs.med(to, f) - rs.med(from, f)) / n }
	fmt.Fprintf(w, "\nEach further %s, per request: %+.1f µs of service CPU, %+.1f µs of Redis CPU, %+.1f µs inside Redis commands.\n",
		unit, d(serverCPU), d(redisCPU), d(redisUsecPerRequest))
}

// defaultsTable shows what each of sluice's speed defaults is worth: each
// target measured with the setting on (the default) and off.
func (rs *runSet) defaultsTable(w io.Writer) bool {
	wrote := false
	for _, d := range []struct {
		setting, load, on, off string
		figure                 string
		f                      func(sample) float64
		format                 string
	}{
		{"request coalescing (`SLUICE_REDIS_COALESCE`)", "Redis, 1 rule", "redis1", "redis1nc", "service + Redis CPU µs per request", bothCPU, "%.1f"},
		{"merged script calls (`SLUICE_REDIS_MERGE`)", "Redis, 1 rule", "redis1", "redis1nm", "Redis CPU µs per request", redisCPU, "%.1f"},
		{"Redis functions (`SLUICE_REDIS_FUNCTIONS`; off: `EVALSHA`)", "Redis, 1 rule", "redis1", "redis1ev", "Redis CPU µs per request", redisCPU, "%.1f"},
		{"gRPC stream workers (`SLUICE_GRPC_STREAM_WORKERS`)", "embedded backend", "memory", "memorynw", "service CPU µs per request", serverCPU, "%.1f"},
		{"local denial cache (`SLUICE_LOCAL_CACHE`)", "attack mix", "attack", "attacknc", "Redis CPU µs per request", redisCPU, "%.1f"},
		{"fixed gRPC flow-control windows (`SLUICE_GRPC_STATIC_WINDOWS`)", "Redis, 1 rule", "redis1", "redis1dw", "service CPU µs per request", serverCPU, "%.1f"},
		{"fixed gRPC flow-control windows (`SLUICE_GRPC_STATIC_WINDOWS`)", "Redis, 1 rule, 1 caller", "redis1-c1", "redis1dw-c1", "service CPU µs per request", serverCPU, "%.1f"},
		{"a floor under the garbage collector's heap goal (`SLUICE_GC_HEAP_FLOOR_BYTES`)", "Redis, 1 rule", "redis1", "redis1gf", "service CPU µs per request", serverCPU, "%.1f"},
		{"a floor under the garbage collector's heap goal (`SLUICE_GC_HEAP_FLOOR_BYTES`)", "Redis, 1 rule", "redis1", "redis1gf", "service peak resident memory, MB", peakRSS, "%.0f"},
	} {
		if !rs.has(d.on) || !rs.has(d.off) {
			continue
		}
		if !wrote {
			fmt.Fprintln(w, "| setting | load | req/s off → on | gain | figure | off → on |")
			fmt.Fprintln(w, "|---|---|---|---:|---|---|")
			wrote = true
		}
		on, off := rs.med(d.on, throughput), rs.med(d.off, throughput)
		fmt.Fprintf(w, "| %s | %s (`%s`, `%s`) | %s → %s | %+.0f%% | %s | "+d.format+" → "+d.format+" |\n", d.setting, d.load, d.off, d.on,
			thousands(off), thousands(on), 100*(on/off-1), d.figure, rs.med(d.off, d.f), rs.med(d.on, d.f))
	}
	return wrote
}

// timeTable splits the machine's time per request between the processes:
// where the time goes.
func (rs *runSet) timeTable(w io.Writer) bool {
	cores := 2.0
	if rs.machine != nil && rs.machine.Nproc > 0 {
		cores = float64(rs.machine.Nproc)
	}
	fmt.Fprintf(w, "| target | the machine's µs per request (%.0f cores × wall ÷ requests) | load generator | service | redis-server | other processes | idle | Redis µs inside commands (wall time) |\n", cores)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	wrote := false
	for _, name := range rs.order {
		if concurrency(name) != 0 || !slices.Contains(targetOrder, base(name)) {
			continue
		}
		wrote = true
		ss := rs.runs[name]
		budget := median(ss, func(s sample) float64 { return s.perRequest(cores * s.cpu.Wall) })
		// Other processes' time below 0 is the CPU counters' rounding.
		others := median(ss, func(s sample) float64 { return s.perRequest(max(0, s.cpu.Others)) })
		used := median(ss, func(s sample) float64 {
			return s.perRequest(s.cpu.Server + s.cpu.Redis + s.cpu.Client + max(0, s.cpu.Others))
		})
		inside := "—"
		if rs.onRedis(name) {
			inside = fmt.Sprintf("%.1f", median(ss, redisUsecPerRequest))
		}
		fmt.Fprintf(w, "| `%s` | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n", name, budget, median(ss, clientCPU), median(ss, serverCPU),
			median(ss, redisCPU), others, max(0, budget-used), inside)
	}
	return wrote
}

// recordedRuns returns the targets at the default concurrency, in order,
// with those of their runs that recorded a figure (has); a target none of
// whose runs did is left out.
func (rs *runSet) recordedRuns(has func(sample) bool) (names []string, runs [][]sample) {
	for _, name := range rs.order {
		if concurrency(name) != 0 || !slices.Contains(targetOrder, base(name)) {
			continue
		}
		ss := slices.DeleteFunc(slices.Clone(rs.runs[name]), func(s sample) bool { return !has(s) })
		if len(ss) > 0 {
			names, runs = append(names, name), append(runs, ss)
		}
	}
	return names, runs
}

// syscallsTable gives each process's read and write system calls per
// request, for the targets at the default concurrency whose runs counted
// them.
func (rs *runSet) syscallsTable(w io.Writer) bool {
	names, runs := rs.recordedRuns(countedSyscalls)
	if len(names) == 0 {
		return false
	}
	fmt.Fprintln(w, "| target | load generator | service | redis-server | all three |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for i, name := range names {
		ss := runs[i]
		// redis-server counts only for the targets that use it (for the
		// others it is idle: its calls are the script's own INFO).
		onRedis := 0.0
		redisCell := "—"
		if rs.onRedis(name) {
			onRedis = 1
			redisCell = fmt.Sprintf("%.2f", median(ss, func(s sample) float64 { return s.perRequest(*s.cpu.RedisSyscalls) / 1e6 }))
		}
		client := median(ss, func(s sample) float64 { return s.perRequest(float64(*s.report.ClientSyscalls)) / 1e6 })
		server := median(ss, func(s sample) float64 { return s.perRequest(*s.cpu.ServerSyscalls) / 1e6 })
		all := median(ss, func(s sample) float64 {
			return s.perRequest(float64(*s.report.ClientSyscalls)+*s.cpu.ServerSyscalls+onRedis**s.cpu.RedisSyscalls) / 1e6
		})
		fmt.Fprintf(w, "| `%s` | %.2f | %.2f | %s | %.2f |\n", name, client, server, redisCell, all)
	}
	return true
}

// peakRSS is the server's peak resident memory in MB, 0 when the run did
// not record it.
func peakRSS(s sample) float64 {
	if s.cpu.ServerPeakRSS == nil {
		return 0
	}
	return *s.cpu.ServerPeakRSS / 1e6
}

// serviceMemoryTable gives each server's peak resident memory over its
// run (VmHWM: every run starts a fresh server), for the targets at the
// default concurrency whose runs recorded it.
func (rs *runSet) serviceMemoryTable(w io.Writer) bool {
	names, runs := rs.recordedRuns(func(s sample) bool { return s.cpu.ServerPeakRSS != nil })
	if len(names) == 0 {
		return false
	}
	fmt.Fprintln(w, "| target | service peak resident memory, MB |")
	fmt.Fprintln(w, "|---|---:|")
	for i, name := range names {
		fmt.Fprintf(w, "| `%s` | %.0f |\n", name, median(runs[i], peakRSS))
	}
	return true
}

// countedSyscalls reports whether the run counted every process's system
// calls.
func countedSyscalls(s sample) bool {
	return s.report.ClientSyscalls != nil && s.cpu.ServerSyscalls != nil && s.cpu.RedisSyscalls != nil
}

// stagesTable splits each profiled service's CPU per request by stage
// (see stageOf), for the targets at the default concurrency.
func (rs *runSet) stagesTable(w io.Writer) bool {
	var cols []string
	for _, name := range []string{"memory", "redis1", "inc1", "redis3", "redis3fw", "inc3", "redis10d", "inc10", "attack", "incattack"} {
		if slices.ContainsFunc(rs.runs[name], func(s sample) bool { return s.stages != nil }) {
			cols = append(cols, name)
		}
	}
	if len(cols) == 0 {
		return false
	}
	// peak is each stage's largest figure over the targets: the rows.
	peak := make(map[string]float64)
	// µs per request of one stage in one target: the median over the
	// rounds that have a profile.
	cell := func(name, stage string) float64 {
		var ss []sample
		for _, s := range rs.runs[name] {
			if s.stages != nil {
				ss = append(ss, s)
			}
		}
		return median(ss, func(s sample) float64 {
			if stage != "" {
				return s.stages[stage] * serverCPU(s)
			}
			rest := 0.0 // "": every stage without a row of its own
			for st, v := range s.stages {
				if _, listed := peak[st]; !listed {
					rest += v
				}
			}
			return rest * serverCPU(s)
		})
	}
	for _, name := range cols {
		for _, s := range rs.runs[name] {
			for stage := range s.stages {
				peak[stage] = max(peak[stage], cell(name, stage))
			}
		}
	}
	// Stages under 1 µs per request in every target share one row.
	const minor = "other stages, each under 1 µs per request"
	for stage, v := range peak {
		if v < 1 {
			delete(peak, stage)
			peak[minor] = max(peak[minor], 0)
		}
	}
	rows := slices.Collect(maps.Keys(peak))
	slices.SortFunc(rows, func(a, b string) int {
		if c := cmp.Compare(peak[b], peak[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(w, "| service CPU µs per request, by stage | `%s` |\n", strings.Join(cols, "` | `"))
	fmt.Fprintf(w, "|---|%s\n", strings.Repeat("---:|", len(cols)))
	line := func(label string, f func(name string) float64) {
		fmt.Fprintf(w, "| %s |", label)
		for _, name := range cols {
			fmt.Fprintf(w, " %.1f |", f(name))
		}
		fmt.Fprintln(w)
	}
	for _, stage := range rows {
		if stage == minor {
			continue
		}
		line(stage, func(name string) float64 { return cell(name, stage) })
	}
	if _, ok := peak[minor]; ok {
		line(minor, func(name string) float64 {
			return cell(name, "") // the stages not listed: see cell
		})
	}
	line("all (the service's CPU per request)", func(name string) float64 { return rs.med(name, serverCPU) })
	return true
}

// roundTripLabel names the noopredis target in the tables.
const roundTripLabel = "no-op that answers each call only after one Redis round trip, shared by the calls waiting together (what the round trip alone costs)"

// summaryTable is the side-by-side table of the README.
func (rs *runSet) summaryTable(w io.Writer) bool {
	if !rs.has("noop") && !rs.has("redis1") {
		return false
	}
	fmt.Fprintln(w, "| | sluice req/s | envoyproxy/ratelimit req/s | sluice ÷ incumbent | p99 ms: sluice / incumbent | service + Redis CPU µs per request: sluice / incumbent | of which Redis: sluice / incumbent |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---|---|")
	for _, r := range []row{{"no-op gRPC server (the ceiling: answers OK, does nothing)", "noop"},
		{roundTripLabel, "noopredis"},
		{"embedded backend (no Redis)", "memory"}, {"Redis, 1 descriptor, 1 limit", "redis1"},
		{"Redis, 3 limits (sluice: 3 rules of 1 descriptor; incumbent: 3 descriptors)", "redis3"},
		{"Redis, 10 descriptors per request", "redis10d"}, {"Redis, attack mix (30% of requests on 4 hot keys)", "attack"},
		{"Redis Cluster, 3 masters, 1 descriptor", "redis1cl"}} {
		if !rs.has(r.name) {
			continue
		}
		tput := rs.med(r.name, throughput)
		s := thousands(tput)
		if n := rs.med("noop", throughput); r.name != "noop" && n > 0 {
			s += fmt.Sprintf(" (%s of the ceiling)", share(tput, n))
		}
		inc := incumbentFor(r.name)
		incTput, incP99, incCPU, incRedis := "—", "—", "—", "—"
		if rs.has(inc) {
			incTput = thousands(rs.med(inc, throughput))
			incP99 = fmt.Sprintf("%.2f", rs.med(inc, p99))
			incCPU = fmt.Sprintf("%.1f", rs.med(inc, bothCPU))
			incRedis = fmt.Sprintf("%.1f", rs.med(inc, redisCPU))
		}
		// Redis's share: what sizes a shard. The no-op and the embedded
		// backend use no Redis (redis-server only idles beside them).
		redis := "—"
		if r.name != "noop" && r.name != "memory" {
			redis = fmt.Sprintf("%.1f", rs.med(r.name, redisCPU))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f / %s | %.1f / %s | %s / %s |\n", r.label, s, incTput, ratio(tput, rs.med(inc, throughput)),
			rs.med(r.name, p99), incP99, rs.med(r.name, bothCPU), incCPU, redis, incRedis)
	}
	return true
}

// goal is one of the figures sluice aims for: measured is the figure,
// met whether it reaches the goal; ok false when it was not measured.
// unjudged, when not empty, is why this run cannot tell whether the goal
// is met: the figure is shown with it instead of a verdict.
type goal struct {
	text     string
	measured func() (figure string, met, ok bool)
	unjudged string
	// reference, when set, measures the round-trip reference (noopredis)
	// by the same goal.
	reference func() (figure string, met, ok bool)
}

// throughputGoal is a goal on a target's throughput: at least factor times
// base's (a share of the ceiling when base is the no-op).
type throughputGoal struct {
	text, target, base string
	factor             float64
}

// throughputGoals are the goals on throughput, each with the row it judges.
var throughputGoals = []throughputGoal{
	{"Redis, 1 rule: ≥ 75% of the no-op ceiling", "redis1", "noop", 0.75},
	{"Redis, 1 rule: ≥ 1.7× the incumbent", "redis1", "inc1", 1.7},
	{"Redis, 3 rules of mixed algorithms: ≥ 60% of the no-op ceiling", "redis3", "noop", 0.60},
	{"Redis, 3 rules of mixed algorithms: ≥ 2.5× the incumbent with 3 descriptors", "redis3", "inc3", 2.5},
}

// goalCallers is the concurrency the speed goals are stated for:
// measure.sh's default C.
const goalCallers = 64

// incumbentKeyHorizon is how long the incumbent's keys can outlive their
// window (its EXPIRATION_JITTER_MAX_SECONDS default): a run of one-second
// windows must last longer to see its Redis memory at steady state.
const incumbentKeyHorizon = 300 * time.Second

// memoryUnjudged says why a run cannot judge the memory goal: a run
// shorter than the incumbent's key horizon (plus its one-second window)
// shows less than the incumbent's steady state. "" when it can.
func (rs *runSet) memoryUnjudged() string {
	if rs.machine != nil {
		if d, err := time.ParseDuration(rs.machine.Duration); err == nil && d > incumbentKeyHorizon+time.Second {
			return ""
		}
	}
	return "not judged: a run this short ends before the incumbent's keys reach their 300 s horizon (see \"Memory at steady state\")"
}

// atLeast is a goal's measure: a/b ≥ want, shown as a share when pct,
// else as a ratio; not measured unless both are.
func atLeast(a, b float64, want float64, pct bool) func() (string, bool, bool) {
	return func() (string, bool, bool) {
		if a <= 0 || b <= 0 {
			return "", false, false
		}
		if pct {
			return nearGoal(100*a/b, 100*want, 0) + "%", a/b >= want, true
		}
		return nearGoal(a/b, want, 2) + "×", a/b >= want, true
	}
}

// atMost is a goal's measure: a/b ≤ want, shown as a ratio.
func atMost(a, b, want float64) func() (string, bool, bool) {
	return func() (string, bool, bool) {
		if a <= 0 || b <= 0 {
			return "", false, false
		}
		return nearGoal(a/b, want, 2) + "×", a/b <= want, true
	}
}

// nearGoal formats x with decimals digits after the point, or with one
// more when that would read as the goal's threshold itself: a figure of
// 74.5% shown as "75%, missed" against a goal of 75% reads as a mistake.
func nearGoal(x, threshold float64, decimals int) string {
	f := strconv.FormatFloat(x, 'f', decimals, 64)
	if x != threshold && f == strconv.FormatFloat(threshold, 'f', decimals, 64) {
		return strconv.FormatFloat(x, 'f', decimals+1, 64)
	}
	return f
}

// throughputGoalsOf are the goals of throughputGoals set for target's
// row, measured on name (target itself, or another target judged by them).
func (rs *runSet) throughputGoalsOf(target, name string) []goal {
	var goals []goal
	for _, g := range throughputGoals {
		if g.target == target {
			goals = append(goals, goal{text: g.text, measured: atLeast(rs.med(name, throughput), rs.med(g.base, throughput), g.factor, g.base == "noop")})
		}
	}
	return goals
}

// cpuAndLatencyGoals are the one-rule row's goals on CPU and p99,
// measured on name.
func (rs *runSet) cpuAndLatencyGoals(name string) []goal {
	m := rs.med
	return []goal{
		{text: "service + Redis CPU per request, 1 rule: ≤ 0.4× the incumbent's", measured: atMost(m(name, bothCPU), m("inc1", bothCPU), 0.4)},
		{text: "p99 at the default concurrency: ≤ the no-op's p99 + 1 ms", measured: func() (string, bool, bool) {
			a, b := m(name, p99), m("noop", p99)
			if a <= 0 || b <= 0 {
				return "", false, false
			}
			return fmt.Sprintf("%+.2f ms", a-b), a <= b+1, true
		}},
	}
}

// speedGoals are the goals on speed, in the goals table's order: the
// throughput goals of the one-rule row measured on one, those of the
// mixed-rules row on three, then the one-rule row's CPU and p99 goals
// measured on one.
func (rs *runSet) speedGoals(one, three string) []goal {
	goals := rs.throughputGoalsOf("redis1", one)
	goals = append(goals, rs.throughputGoalsOf("redis3", three)...)
	return append(goals, rs.cpuAndLatencyGoals(one)...)
}

// goalsTable lists sluice's performance goals against this run.
func (rs *runSet) goalsTable(w io.Writer) bool {
	m := rs.med
	goals := rs.speedGoals("redis1", "redis3")
	if rs.has("noopredis") {
		for i, r := range rs.speedGoals("noopredis", "noopredis") {
			goals[i].reference = r.measured
		}
	}
	goals = append(goals, []goal{
		{text: "embedded backend: ≥ 90% of the no-op ceiling", measured: atLeast(m("memory", throughput), m("noop", throughput), 0.90, true)},
		{text: "Redis time inside commands, 1 fixed window: ≤ 2× the incumbent's", measured: atMost(m("redis1", redisUsecPerRequest), m("inc1", redisUsecPerRequest), 2)},
		{text: "Redis time inside commands, 3 fixed-window rules: ≤ the incumbent's for 3 descriptors", measured: atMost(m("redis3fw", redisUsecPerRequest), m("inc3", redisUsecPerRequest), 1)},
	}...)
	// The speed goals are for the default concurrency: a run at another
	// one shows its figures without a verdict.
	if rs.machine != nil && rs.machine.C != 0 && rs.machine.C != goalCallers {
		for i := range goals {
			goals[i].unjudged = fmt.Sprintf("not judged: measured at %d callers, the goal is for %d", rs.machine.C, goalCallers)
		}
	}
	goals = append(goals, goal{text: "Redis memory per active descriptor, per-second limit: ≤ 1/50 of the incumbent's at steady state",
		measured: atMost(m("redis1", sample.bytesPerDescriptor), m("inc1", sample.bytesPerDescriptor), 1.0/50), unjudged: rs.memoryUnjudged()})
	withRef := rs.has("noopredis")
	if withRef {
		fmt.Fprintln(w, "| goal | this run | | the round-trip reference, judged by the same goal |")
		fmt.Fprintln(w, "|---|---:|---|---|")
	} else {
		fmt.Fprintln(w, "| goal | this run | |")
		fmt.Fprintln(w, "|---|---:|---|")
	}
	verdict := func(met bool) string {
		if met {
			return "met"
		}
		return "missed"
	}
	wrote := false
	for _, g := range goals {
		figure, met, ok := g.measured()
		if !ok {
			continue
		}
		wrote = true
		v := verdict(met)
		if g.unjudged != "" {
			v = g.unjudged
		}
		fmt.Fprintf(w, "| %s | %s | %s |", g.text, figure, v)
		if withRef {
			ref := "—"
			if g.reference != nil {
				if f, met, ok := g.reference(); ok {
					ref = f + ", " + verdict(met)
				}
			}
			fmt.Fprintf(w, " %s |", ref)
		}
		fmt.Fprintln(w)
	}
	if wrote {
		rs.roundTripNote(w)
		rs.redisCapacityNote(w)
	}
	return wrote
}

// redisCapacityNote says, under the goals, what Redis's CPU per request
// is for sluice and for the incumbent, with one rule and with three
// fixed-window rules (against the incumbent's three descriptors), when
// this run measured them: all of redis-server's work, reading, running and
// answering the commands, which is what one shard's core holds. The goals
// on Redis time count time inside commands (INFO commandstats): a
// script's whole work, but only the running of the incumbent's plain
// commands.
func (rs *runSet) redisCapacityNote(w io.Writer) {
	var parts []string
	for _, p := range []struct{ label, sluice, inc string }{
		{"with 1 rule", "redis1", "inc1"},
		{"with 3 fixed-window rules, against the incumbent's 3 descriptors", "redis3fw", "inc3"},
	} {
		a, b := rs.med(p.sluice, redisCPU), rs.med(p.inc, redisCPU)
		if a <= 0 || b <= 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%.1f µs against %.1f %s (%.2f×: a shard holds %.2f× as many requests)", a, b, p.label, a/b, b/a))
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "\nRedis CPU per request, sluice against the incumbent: %s. That is all of redis-server's work, reading, running and answering the commands: what one shard's core holds. The goals on Redis time count only the time inside commands (`INFO commandstats`): all of a script's work, but of the incumbent's plain commands only their running; decision 0086 measures how far no script can go below them.\n", strings.Join(parts, "; "))
}

// roundTripNote says, under the goals, what their last column is, how
// much of the ceiling a Redis round trip alone leaves (the noopredis
// target) and how much of that sluice on Redis reaches, when this run
// measured them.
func (rs *runSet) roundTripNote(w io.Writer) {
	ceiling, rt := rs.med("noop", throughput), rs.med("noopredis", throughput)
	if ceiling <= 0 || rt <= 0 {
		return
	}
	fmt.Fprintf(w, "\nThe last column judges by the same goals the round-trip reference (`noopredis`): a no-op that answers each call only after one Redis round trip (an `ECHO`, shared by the calls waiting together, as sluice's requests share a pipeline) and does nothing else. It reached %s of the ceiling: what a round trip alone leaves on this machine, at this concurrency.",
		share(rt, ceiling))
	var parts []string
	for _, r := range []row{{"1 rule", "redis1"}, {"3 rules of mixed algorithms", "redis3"}} {
		if t := rs.med(r.name, throughput); t > 0 {
			parts = append(parts, fmt.Sprintf("%s of it with %s", share(t, rt), r.label))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, " sluice on Redis reached %s.", strings.Join(parts, " and "))
	}
	fmt.Fprintln(w)
}

// machineBlock describes the machine, the settings and the command.
func (rs *runSet) machineBlock(w io.Writer) bool {
	m := rs.machine
	if m == nil {
		return false
	}
	fmt.Fprintf(w, "- %d CPUs (%s), %d GB RAM, Linux %s; %s; redis-server %s. Measured %s.\n",
		m.Nproc, m.CPUModel, m.MemGB, m.Kernel, m.Go, m.Redis, m.Date)
	total := 0 // every directory's rounds (rs.machine is the first's)
	for _, r := range rs.rounds {
		total += r
	}
	rounds := fmt.Sprintf("%d alternated rounds", total)
	if total == 1 {
		rounds = "1 round"
	}
	if len(rs.rounds) > 1 {
		rounds += fmt.Sprintf(" from %d runs of the command below, one after the other (%s rounds)", len(rs.rounds), joinInts(rs.rounds))
	}
	fmt.Fprintf(w, "- %s (every target once per round, a fresh server process each time), medians; each run %s after %s of warm-up; %d callers unless a table says otherwise, over %s keys chosen uniformly.\n",
		rounds, m.Duration, m.Warmup, m.C, thousands(float64(m.Keys)))
	var others, load []float64
	for _, ss := range rs.runs {
		for _, s := range ss {
			if s.cpu.Wall > 0 {
				others = append(others, max(0, s.cpu.Others/s.cpu.Wall)) // below 0: the counters' rounding
			}
			load = append(load, s.cpu.Loadavg)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		slices.Sort(load)
		fmt.Fprintf(w, "- Other processes on the machine used %.2f cores during the median run (at most %.2f); load average before the median run %.1f.\n",
			others[len(others)/2], others[len(others)-1], load[len(load)/2])
	}
	// The command, with every setting that is not measure.sh's default.
	cmd := "ROUNDS=" + strconv.Itoa(m.Rounds)
	if m.Incumbent {
		cmd = "INCUMBENT_BIN=/path/to/ratelimit " + cmd
	}
	for _, s := range []struct{ name, value, def string }{
		{"DURATION", m.Duration, "10s"}, {"WARMUP", m.Warmup, "2s"}, {"C", strconv.Itoa(m.C), "64"},
		{"KEYS", strconv.Itoa(m.Keys), "10000"}, {"TARGETS", m.TargetsEnv, ""}, {"SLUICE_ENV", m.SluiceEnv, ""}, {"PROFILE", m.Profile, ""},
	} {
		if s.value != s.def {
			cmd += " " + s.name + "='" + s.value + "'"
		}
	}
	fmt.Fprintf(w, "- Command: `%s cmd/sluice-bench/measure.sh OUT`", cmd)
	if rs.elapsed > 0 {
		fmt.Fprintf(w, " (%.0f minutes)", rs.elapsed/60)
	}
	outs := "OUT"
	if len(rs.rounds) > 1 {
		fmt.Fprintf(w, ", run %d times into OUT1 … OUT%d (the others with their own ROUNDS)", len(rs.rounds), len(rs.rounds))
		outs = "OUT1 … OUT" + strconv.Itoa(len(rs.rounds))
	}
	fmt.Fprintf(w, ", then `go run ./cmd/sluice-bench summarize --doc docs/benchmarks.md --doc README.md %s`. Targets: %s.\n", outs, m.Targets)
	return true
}

// joinInts writes ns as "5 and 3", or "5, 3 and 3".
func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
