package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/loadgen"
)

// wantError checks err against a table case's expected error (a substring;
// "" for none) and reports whether the case expected one.
func wantError(t *testing.T, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one with %q", err, want)
	}
	return true
}

func TestParseRedisInfo(t *testing.T) {
	for _, tt := range []struct {
		name    string
		text    string
		want    redisFigures
		wantErr string
	}{
		{
			name: "scripts: only their time counts, admin commands never",
			text: "# node 127.0.0.1:1\r\n# Commandstats\r\ncmdstat_evalsha:calls=10,usec=200,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n" +
				"cmdstat_set:calls=10,usec=30,usec_per_call=3.00\r\ncmdstat_config|resetstat:calls=1,usec=40,usec_per_call=40\r\n" +
				"cmdstat_info:calls=3,usec=90,usec_per_call=30\r\n# Memory\r\nused_memory:1000\r\nused_memory_human:1K\r\n# Keyspace\r\ndb0:keys=5,expires=5,avg_ttl=10\r\n",
			want: redisFigures{Nodes: 1, Usec: 200, Commands: 10, Scripts: 10, Memory: 1000, Keys: 5},
		},
		{
			name: "no scripts: every data command, summed over the nodes",
			text: "# node a\ncmdstat_incrby:calls=4,usec=8\ncmdstat_expire:calls=4,usec=4\ncmdstat_cluster|slots:calls=9,usec=99\nused_memory:10\ndb0:keys=2,expires=2\n" +
				"# node b\ncmdstat_incrby:calls=6,usec=12\ncmdstat_hello:calls=1,usec=5\nused_memory:20\ndb0:keys=3,expires=3\ndb1:keys=1,expires=0\n",
			want: redisFigures{Nodes: 2, Usec: 24, Commands: 14, Memory: 30, Keys: 6},
		},
		{
			name: "functions count as scripts",
			text: "# node a\ncmdstat_fcall:calls=3,usec=30\ncmdstat_function|load:calls=1,usec=500\ncmdstat_get:calls=3,usec=3\n",
			want: redisFigures{Nodes: 1, Usec: 30, Commands: 3, Scripts: 3},
		},
		{name: "empty", text: "", want: redisFigures{}},
		{name: "a bad number", text: "cmdstat_get:calls=x,usec=1\n", wantErr: "line 1: cmdstat_get: calls"},
		{name: "not key=value", text: "cmdstat_get:calls\n", wantErr: "is not key=value"},
		{name: "bad used_memory", text: "x\nused_memory:lots\n", wantErr: "line 2: used_memory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRedisInfo(tt.text)
			if wantError(t, err, tt.wantErr) {
				return
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTargetNames(t *testing.T) {
	for _, tt := range []struct {
		name, base, noop, incumbent string
		c                           int
	}{
		{"redis1", "redis1", "noop", "inc1", 0},
		{"redis1-c16", "redis1", "noop-c16", "inc1-c16", 16},
		{"redis3fw", "redis3fw", "noop", "inc3", 0},
		{"redis10d-c1", "redis10d", "noop-c1", "inc10-c1", 1},
		{"redis1cl", "redis1cl", "noop", "inc1cl", 0},
		{"redis5d", "redis5d", "noop", "inc5", 0},
		{"redis3dcl", "redis3dcl", "noop", "inc3cl", 0},
		{"attack", "attack", "noop", "incattack", 0},
		{"inc1-c256", "inc1", "noop-c256", "", 256},
		{"memory", "memory", "noop", "", 0},
		{"odd-cx", "odd-cx", "noop", "", 0},
	} {
		if b, c, n, i := base(tt.name), concurrency(tt.name), noopFor(tt.name), incumbentFor(tt.name); b != tt.base || c != tt.c || n != tt.noop || i != tt.incumbent {
			t.Errorf("%s: base %q concurrency %d no-op %q incumbent %q, want %q %d %q %q", tt.name, b, c, n, i, tt.base, tt.c, tt.noop, tt.incumbent)
		}
	}
	order := []string{"zzz", "inc1-c16", "redis1-c16", "noop-c1", "inc1", "noop", "redis1"}
	sortTargets(order)
	if want := []string{"noop", "noop-c1", "redis1", "redis1-c16", "inc1", "inc1-c16", "zzz"}; !slices.Equal(order, want) {
		t.Errorf("sorted %q, want %q", order, want)
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 18778.6: "18,779", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestReplaceBlocks(t *testing.T) {
	blocks := []block{{name: "a", text: "new A\n"}, {name: "b", text: "new B\n"}, {name: "k", text: "unused\n", keep: true}}
	for _, tt := range []struct {
		name, doc, want, wantErr string
	}{
		{
			name: "every marked block replaced, the prose kept",
			doc:  "# T\n\n" + startMarker("a") + "\nold\nlines\n" + endMarker + "\n\ntext\n" + startMarker("b") + "\n" + endMarker + "\nend\n",
			want: "# T\n\n" + startMarker("a") + "\nnew A\n" + endMarker + "\n\ntext\n" + startMarker("b") + "\nnew B\n" + endMarker + "\nend\n",
		},
		{
			name: "a block marked keep keeps the doc's text",
			doc:  startMarker("k") + "\nold K\n" + endMarker + "\n" + startMarker("a") + "\nold\n" + endMarker + "\n",
			want: startMarker("k") + "\nold K\n" + endMarker + "\n" + startMarker("a") + "\nnew A\n" + endMarker + "\n",
		},
		{name: "unknown block", doc: startMarker("c") + "\n" + endMarker, wantErr: `marker "c": summarize has no such block`},
		{name: "no end", doc: startMarker("a") + "\nold\n", wantErr: `marker "a" has no <!-- end -->`},
		{name: "unclosed marker", doc: markerPrefix + "a\n", wantErr: "is not closed"},
		{name: "no markers", doc: "# T\n", wantErr: "no <!-- sluice-bench summarize: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := replaceBlocks(tt.doc, blocks)
			if wantError(t, err, tt.wantErr) {
				return
			}
			if got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
			again, err := replaceBlocks(got, blocks)
			if err != nil || again != got {
				t.Errorf("a second replacement changed the doc (%v):\n%s", err, again)
			}
		})
	}
}

// benchRun writes one run of target name with the given throughput,
// callers, CPU seconds (service, Redis) and Redis command time.
func benchRun(t *testing.T, dir, name string, tput float64, callers int, server, redis float64, usec int) {
	t.Helper()
	files := map[string]string{
		name + ".1.json": fmt.Sprintf(`{"throughput_rps":%g,"calls_total":10000,"keys":100,"workers":%d,"descriptors":["remote_address={ip}"],"latency_ms":{"p50":1,"p99":%g,"p999":3}}`,
			tput, callers, 100000/tput),
		name + ".1.cpu.json": fmt.Sprintf(`{"wall_s":1,"server_cpu_s":%g,"redis_cpu_s":%g,"client_cpu_s":0.1,"others_cpu_s":0.2,"loadavg_before":1.5}`, server, redis),
	}
	if usec > 0 {
		files[name+".1.redis-start.txt"] = "# node a\nused_memory:1000\n"
		files[name+".1.redis.txt"] = fmt.Sprintf("# node a\ncmdstat_evalsha:calls=10000,usec=%d\nused_memory:%d\ndb0:keys=50,expires=50\n", usec, 1000+usec)
	}
	writeFiles(t, dir, files)
}

// TestSummarizeDoc: one run's directory fills every block of a doc with
// one command, and the scaling tables put each target in its place.
func TestSummarizeDoc(t *testing.T) {
	dir := t.TempDir()
	benchRun(t, dir, "noop", 40000, 64, 0.2, 0, 0)
	benchRun(t, dir, "noop-c16", 20000, 16, 0.2, 0, 0)
	benchRun(t, dir, "noopredis-c16", 16000, 16, 0.3, 0.05, 100)
	benchRun(t, dir, "redis1", 20000, 64, 0.3, 0.2, 100000)
	benchRun(t, dir, "redis1-c16", 10000, 16, 0.4, 0.3, 100000)
	benchRun(t, dir, "inc1", 10000, 64, 0.6, 0.1, 20000)
	benchRun(t, dir, "redis1cl", 25000, 64, 0.3, 0.3, 100000)
	benchRun(t, dir, "redis6fw", 10000, 64, 0.4, 0.7, 350000)
	benchRun(t, dir, "memory", 30000, 64, 0.25, 0, 0)
	benchRun(t, dir, "memorynw", 25000, 64, 0.3, 0, 0)
	benchRun(t, dir, "redis1dw", 18000, 64, 0.35, 0.2, 100000)
	writeFiles(t, dir, map[string]string{
		"machine.json": `{"date":"2026-01-02","nproc":2,"cpu_model":"Test CPU","mem_gb":8,"kernel":"6.1","go":"go1.26","redis":"7.0.15","rounds":1,"duration":"10s","warmup":"2s","c":64,"keys":100,"targets":"noop redis1","incumbent":true}`,
		"elapsed.json": `{"elapsed_s":600}`,
		"redis1.1.pprof": string(testProfile([]string{"github.com/redis/go-redis/v9.(*Conn).Write", "google.golang.org/grpc.(*Server).serve"},
			[][]uint64{{1}, {2}}, []struct {
				locs []uint64
				ns   int64
			}{{[]uint64{1}, 75}, {[]uint64{2}, 25}})),
	})
	out := summarizeOut(t, dir)
	for _, want := range []string{
		"- 2 CPUs (Test CPU), 8 GB RAM, Linux 6.1; go1.26; redis-server 7.0.15. Measured 2026-01-02.",
		"`INCUMBENT_BIN=/path/to/ratelimit ROUNDS=1 KEYS='100' cmd/sluice-bench/measure.sh OUT` (10 minutes)", // KEYS is not the default
		// concurrency: c=16 and c=64, with the incumbent only at 64 and
		// the round-trip reference only at 16.
		"| 16 | 20,000 | 16,000 | 10,000 | — | 50% | 62% | — | 5.00 / 6.25 / 10.00 / — | 70.0 / — |",
		"| 64 | 40,000 | — | 20,000 | 10,000 | 50% | — | 2.00× | 2.50 / — / 5.00 / 10.00 | 50.0 / 70.0 |",
		// the cluster against one Redis.
		"| sluice, Redis Cluster of 3 masters | `redis1cl` | 25,000 | 62% | — | 1.00 / 4.00 / 3.00 | 30.0 / 30.0 / 10.0 | 10.00 | 1.00 | 50 | 1,000 |",
		"3 masters ÷ one Redis, req/s: sluice 1.25×, incumbent —.",
		// rules: (6 rules − 1 rule) / 5.
		"Each further fixed-window rule, per request: +2.0 µs of service CPU, +10.0 µs of Redis CPU, +5.0 µs inside Redis commands.",
		// a default, on and off; the other defaults' pairs were not measured.
		"| gRPC stream workers (`SLUICE_GRPC_STREAM_WORKERS`) | embedded backend (`memorynw`, `memory`) | 25,000 → 30,000 | +20% | service CPU µs per request | 30.0 → 25.0 |\n",
		"| fixed gRPC flow-control windows (`SLUICE_GRPC_STATIC_WINDOWS`) | Redis, 1 rule (`redis1dw`, `redis1`) | 18,000 → 20,000 | +11% | service CPU µs per request | 35.0 → 30.0 |\n<!-- end -->",
		// goals.
		"| Redis, 1 rule: ≥ 75% of the no-op ceiling | 50% | missed |",
		"| Redis, 1 rule: ≥ 1.7× the incumbent | 2.00× | met |",
		"| Redis time inside commands, 1 fixed window: ≤ 2× the incumbent's | 5.00× | missed |",
		// Redis CPU per request: 0.2 and 0.1 CPU seconds over 10,000 calls.
		"Redis CPU per request, sluice against the incumbent: 20.0 µs against 10.0 with 1 rule (2.00×: a shard holds 0.50× as many requests).",
		// the summary: memory has no Redis CPU; redis1's Redis CPU beside
		// the incumbent's (0.2 and 0.1 CPU seconds over 10,000 calls).
		"| embedded backend (no Redis) | 30,000 (75% of the ceiling) | — | — | 3.33 / — | 25.0 / — | — / — |",
		"| Redis, 1 descriptor, 1 limit | 20,000 (50% of the ceiling) | 10,000 | 2.00× | 5.00 / 10.00 | 50.0 / 70.0 | 20.0 / 10.0 |",
		// where the time goes: 2 cores × 1 s / 10,000 calls = 200 µs.
		"| `redis1` | 200.0 | 10.0 | 30.0 | 20.0 | 20.0 | 120.0 | 10.0 |",
		"| `noop` | 200.0 | 10.0 | 20.0 | 0.0 | 20.0 | 150.0 | — |",
		startMarker("three-limits") + "\n" + notMeasured + endMarker,
		// Redis CPU, sluice against the incumbent: 20 and 10 µs per
		// request; 100,000 and 20,000 µs inside commands over 10,000 calls.
		"| 1 descriptor, 1 fixed window | `redis1`, `inc1` | 20.0 / 10.0 | 2.00× | 2.00× | 10.0 / 2.0 | — / — | evalsha 1.00; evalsha 1.00 |",
		// stages: 75% and 25% of the service's 30 µs per request.
		"| service CPU µs per request, by stage | `redis1` |\n|---|---:|\n| Redis client: go-redis | 22.5 |\n| gRPC and HTTP/2 | 7.5 |\n| all (the service's CPU per request) | 30.0 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}

	doc := filepath.Join(t.TempDir(), "bench.md")
	writeFiles(t, filepath.Dir(doc), map[string]string{"bench.md": "# B\n\n" + startMarker("goals") + "\nold\n" + endMarker + "\n\nprose\n"})
	summarizeOut(t, "--doc", doc, dir)
	got, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	// The doc holds exactly the block summarize prints, prose kept.
	if !strings.HasPrefix(string(got), "# B\n\n"+startMarker("goals")+"\n| goal |") || !strings.HasSuffix(string(got), endMarker+"\n\nprose\n") ||
		!strings.Contains(out, string(got)[len("# B\n\n"):len(got)-len("\n\nprose\n")]) {
		t.Errorf("doc after --doc:\n%s", got)
	}
	// --keep-unmeasured: the blocks this run did not measure (three-limits)
	// keep the doc's text; the others are replaced.
	writeFiles(t, filepath.Dir(doc), map[string]string{"bench.md": startMarker("three-limits") + "\nold 3\n" + endMarker + "\n" +
		startMarker("rules") + "\nold rules\n" + endMarker + "\n"})
	summarizeOut(t, "--keep-unmeasured", "--doc", doc, dir)
	if got, err = os.ReadFile(doc); err != nil {
		t.Fatal(err)
	}
	checkText(t, string(got), []string{startMarker("three-limits") + "\nold 3\n" + endMarker, startMarker("rules") + "\n| |"}, []string{"old rules", notMeasured})
	if code := run(context.Background(), []string{"summarize", "--keep-unmeasured", dir}, io.Discard, io.Discard); code != 1 {
		t.Errorf("--keep-unmeasured without --doc: exit %d, want 1", code)
	}
	if code := run(context.Background(), []string{"summarize", "--doc", filepath.Join(t.TempDir(), "missing.md"), dir}, io.Discard, io.Discard); code != 1 {
		t.Errorf("--doc of a missing file: exit %d, want 1", code)
	}
}

// The memory goal is judged only from runs that outlast the incumbent's
// 300 s key horizon; a shorter run shows the figure and says why it
// gives no verdict, whatever the ratio.
func TestMemoryGoalJudgedOnlyPastTheHorizon(t *testing.T) {
	mem := func(bytes float64) []sample {
		return []sample{{report: loadgen.Report{Keys: 1000}, redis: redisFigures{Memory: bytes * 1000}}}
	}
	for _, tc := range []struct {
		name          string
		duration      string
		sluice, inc   float64
		want, notWant string
	}{
		{"short run, ratio above the goal", "10s", 100, 1000, "| 0.10× | not judged: a run this short ends before", "| met |"},
		{"short run, ratio within the goal", "10s", 10, 1000, "| 0.01× | not judged:", "| met |"},
		{"run at the horizon", "300s", 10, 1000, "not judged:", "| met |"},
		{"run past the horizon, met", "310s", 10, 1000, "| 0.01× | met |", "not judged"},
		{"run past the horizon, missed", "310s", 100, 1000, "| 0.10× | missed |", "not judged"},
		{"duration unknown", "", 10, 1000, "not judged:", "| met |"},
		{"past the horizon at 4 callers: memory is judged", "310s", 10, 1000, "| 0.01× | met |", "not judged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			callers := 64
			if strings.Contains(tc.name, "4 callers") {
				callers = 4
			}
			rs := &runSet{runs: map[string][]sample{"redis1": mem(tc.sluice), "inc1": mem(tc.inc)},
				machine: &machineInfo{Duration: tc.duration, C: callers}}
			checkGoalRow(t, rs, "| Redis memory per active descriptor", tc.want, tc.notWant)
		})
	}
}

// The speed goals are stated for 64 callers: a run at another concurrency
// (the 310 s memory run is at 4) shows their figures without a verdict.
func TestSpeedGoalsJudgedOnlyAtTheirConcurrency(t *testing.T) {
	tput := func(rps float64) []sample {
		return []sample{{report: loadgen.Report{Throughput: rps}}}
	}
	for _, tc := range []struct {
		callers       int
		want, notWant string
	}{
		{64, "| 2.00× | met |", "not judged"},
		{0, "| 2.00× | met |", "not judged"}, // a run that did not record C
		{4, "| 2.00× | not judged: measured at 4 callers, the goal is for 64 |", "| met |"},
		{256, "| 2.00× | not judged: measured at 256 callers", "| met |"},
	} {
		t.Run(fmt.Sprint(tc.callers), func(t *testing.T) {
			rs := &runSet{runs: map[string][]sample{"redis1": tput(20000), "inc1": tput(10000)},
				machine: &machineInfo{C: tc.callers}}
			checkGoalRow(t, rs, "| Redis, 1 rule: ≥ 1.7× the incumbent", tc.want, tc.notWant)
		})
	}
}

// checkGoalRow checks the row of rs's goals table that starts with prefix:
// it holds want and not notWant.
func checkGoalRow(t *testing.T, rs *runSet, prefix, want, notWant string) {
	t.Helper()
	var b strings.Builder
	if !rs.goalsTable(&b) {
		t.Fatal("goalsTable wrote nothing")
	}
	var row string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, prefix) {
			row = l
		}
	}
	if !strings.Contains(row, want) || strings.Contains(row, notWant) {
		t.Errorf("row %q: want %q, not %q", row, want, notWant)
	}
}

// TestRoundTripReference: when the run measured the round-trip reference,
// the goals table judges it by the speed goals in a last column, and the
// note under the table gives its share of the ceiling and sluice's share
// of it, only for the targets this run measured.
func TestRoundTripReference(t *testing.T) {
	tput := func(rps float64) []sample {
		return []sample{{report: loadgen.Report{Throughput: rps}}}
	}
	for _, tc := range []struct {
		name          string
		runs          map[string][]sample
		want, notWant []string
	}{
		{"all measured", map[string][]sample{"noop": tput(40000), "noopredis": tput(30000), "redis1": tput(24000),
			"inc1": tput(16000), "redis3": tput(15000), "inc3": tput(13000)},
			[]string{"| goal | this run | | the round-trip reference, judged by the same goal |",
				"| Redis, 1 rule: ≥ 75% of the no-op ceiling | 60% | missed | 75%, met |",
				"| Redis, 1 rule: ≥ 1.7× the incumbent | 1.50× | missed | 1.88×, met |",
				"| Redis, 3 rules of mixed algorithms: ≥ 60% of the no-op ceiling | 38% | missed | 75%, met |",
				"| Redis, 3 rules of mixed algorithms: ≥ 2.5× the incumbent with 3 descriptors | 1.15× | missed | 2.31×, missed |",
				"reached 75% of the ceiling",
				"sluice on Redis reached 80% of it with 1 rule and 50% of it with 3 rules of mixed algorithms."}, nil},
		{"no mixed rules", map[string][]sample{"noop": tput(40000), "noopredis": tput(30000), "redis1": tput(24000)},
			[]string{"| Redis, 1 rule: ≥ 75% of the no-op ceiling | 60% | missed | 75%, met |", "reached 75% of the ceiling",
				"sluice on Redis reached 80% of it with 1 rule."}, []string{"mixed"}},
		{"no round-trip reference", map[string][]sample{"noop": tput(40000), "redis1": tput(24000)},
			[]string{"| Redis, 1 rule: ≥ 75% of the no-op ceiling | 60% | missed |\n"}, []string{"round trip", "reference"}},
		{"no ceiling", map[string][]sample{"noopredis": tput(30000), "redis1": tput(24000), "inc1": tput(16000)},
			[]string{"| Redis, 1 rule: ≥ 1.7× the incumbent | 1.50× | missed | 1.88×, met |"}, []string{"reached"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &runSet{runs: tc.runs}
			var b strings.Builder
			rs.goalsTable(&b)
			checkText(t, b.String(), tc.want, tc.notWant)
		})
	}
}

// The system-calls table shows each process's read and write calls per
// request, only for runs that counted them, and redis-server only for
// targets that use Redis.
func TestSyscallsTable(t *testing.T) {
	counted := func(calls uint64, client uint64, server, redis, commands float64) sample {
		return sample{
			report: loadgen.Report{CallsTotal: calls, ClientSyscalls: &client},
			cpu:    cpuFigures{ServerSyscalls: &server, RedisSyscalls: &redis},
			redis:  redisFigures{Commands: commands},
		}
	}
	uncounted := sample{report: loadgen.Report{CallsTotal: 1000}}
	for _, tc := range []tableCase{
		{"counted", map[string][]sample{
			"noop":   {counted(1000, 300, 280, 50, 0)},
			"redis1": {counted(1000, 500, 900, 220, 140), counted(1000, 700, 1100, 260, 140), counted(1000, 600, 1000, 240, 140)},
		}, []string{"noop", "redis1"},
			[]string{"| target | load generator | service | redis-server | all three |",
				"| `noop` | 0.30 | 0.28 | — | 0.58 |", // redis-server idle: left out of the sum
				"| `redis1` | 0.60 | 1.00 | 0.24 | 1.84 |"}, nil, true},
		{"runs of an older measure.sh", map[string][]sample{"redis1": {uncounted}}, []string{"redis1"}, nil, []string{"|"}, false},
		{"only the counted runs of a target", map[string][]sample{"redis1": {uncounted, counted(1000, 500, 900, 220, 140)}},
			[]string{"redis1"}, []string{"| `redis1` | 0.50 | 0.90 | 0.22 | 1.62 |"}, nil, true},
		{"not at other concurrencies", map[string][]sample{"redis1-c16": {counted(1000, 500, 900, 220, 140)}},
			[]string{"redis1-c16"}, nil, []string{"redis1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkTable(t, (*runSet).syscallsTable, tc)
		})
	}
}

// tableCase is one case of a table's test: the runs (in order), whether
// the table is written, and what its text holds and lacks.
type tableCase struct {
	name          string
	runs          map[string][]sample
	order         []string
	want, notWant []string
	wrote         bool
}

// checkTable renders one table of tc's run set and checks it against tc.
func checkTable(t *testing.T, table func(*runSet, io.Writer) bool, tc tableCase) {
	t.Helper()
	rs := &runSet{runs: tc.runs, order: tc.order}
	var b strings.Builder
	if got := table(rs, &b); got != tc.wrote {
		t.Errorf("wrote %v, want %v", got, tc.wrote)
	}
	checkText(t, b.String(), tc.want, tc.notWant)
}

// checkText fails t for each of want that text lacks and each of notWant
// that it holds.
func checkText(t *testing.T, text string, want, notWant []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("no %q in\n%s", w, text)
		}
	}
	for _, w := range notWant {
		if strings.Contains(text, w) {
			t.Errorf("%q in\n%s", w, text)
		}
	}
}

// A goal's figure gets one more decimal only when rounding would show the
// threshold itself beside a verdict it does not explain.
func TestNearGoal(t *testing.T) {
	for _, tc := range []struct {
		x, threshold float64
		decimals     int
		want         string
	}{
		{74.51, 75, 0, "74.5"},
		{75.4, 75, 0, "75.4"},
		{75, 75, 0, "75"},
		{73.6, 75, 0, "74"},
		{59, 75, 0, "59"},
		{1.699, 1.7, 2, "1.699"},
		{1.702, 1.7, 2, "1.702"},
		{1.68, 1.7, 2, "1.68"},
		{0.42, 0.4, 2, "0.42"},
	} {
		if got := nearGoal(tc.x, tc.threshold, tc.decimals); got != tc.want {
			t.Errorf("nearGoal(%v, %v, %d) = %q, want %q", tc.x, tc.threshold, tc.decimals, got, tc.want)
		}
	}
}

func TestServiceMemoryTable(t *testing.T) {
	recorded := func(bytes float64) sample { return sample{cpu: cpuFigures{ServerPeakRSS: &bytes}} }
	for _, tc := range []tableCase{
		{"recorded", map[string][]sample{
			"redis1": {recorded(90e6), recorded(50e6), recorded(70e6)},
			"inc1":   {recorded(40e6)},
		}, []string{"redis1", "inc1"},
			[]string{"| target | service peak resident memory, MB |", "| `redis1` | 70 |", "| `inc1` | 40 |"}, nil, true},
		{"runs of an older measure.sh", map[string][]sample{"redis1": {{}}}, []string{"redis1"}, nil, []string{"|"}, false},
		{"only the recorded runs of a target", map[string][]sample{"redis1": {{}, recorded(30e6)}},
			[]string{"redis1"}, []string{"| `redis1` | 30 |"}, nil, true},
		{"not at other concurrencies", map[string][]sample{"redis1-c16": {recorded(30e6)}},
			[]string{"redis1-c16"}, nil, []string{"redis1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkTable(t, (*runSet).serviceMemoryTable, tc)
		})
	}
}

// Runs of the command merged into one summary: the rounds are the sum of
// every directory's, and the machine block says how many runs gave them
// and how to summarize them together.
func TestSummarizeMergedRuns(t *testing.T) {
	machine := func(rounds int) string {
		return fmt.Sprintf(`{"date":"2026-01-02","nproc":2,"cpu_model":"Test CPU","mem_gb":8,"kernel":"6.1","go":"go1.26","redis":"7.0.15","rounds":%d,"duration":"10s","warmup":"2s","c":64,"keys":10000,"targets":"noop redis1","incumbent":false}`, rounds)
	}
	for _, tc := range []struct {
		name    string
		rounds  []int
		want    []string
		notWant []string
	}{
		{"one run", []int{3}, []string{"- 3 alternated rounds (every target", "`ROUNDS=3 cmd/sluice-bench/measure.sh OUT` (10 minutes), then `go run ./cmd/sluice-bench summarize --doc docs/benchmarks.md --doc README.md OUT`."},
			[]string{"runs of the command", "OUT1"}},
		{"two runs", []int{5, 3}, []string{"- 8 alternated rounds from 2 runs of the command below, one after the other (5 and 3 rounds) (every target",
			"`ROUNDS=5 cmd/sluice-bench/measure.sh OUT` (20 minutes), run 2 times into OUT1 … OUT2 (the others with their own ROUNDS), then `go run ./cmd/sluice-bench summarize --doc docs/benchmarks.md --doc README.md OUT1 … OUT2`."}, nil},
		{"three runs", []int{1, 1, 2}, []string{"- 4 alternated rounds from 3 runs of the command below, one after the other (1, 1 and 2 rounds)"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dirs []string
			for _, r := range tc.rounds {
				dir := t.TempDir()
				benchRun(t, dir, "noop", 40000, 64, 0.2, 0, 0)
				benchRun(t, dir, "redis1", 20000, 64, 0.3, 0.2, 100000)
				writeFiles(t, dir, map[string]string{"machine.json": machine(r), "elapsed.json": `{"elapsed_s":600}`})
				dirs = append(dirs, dir)
			}
			out := summarizeOut(t, dirs...)
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("summary lacks %q:\n%s", want, out)
				}
			}
			for _, not := range tc.notWant {
				if strings.Contains(out, not) {
					t.Errorf("summary has %q:\n%s", not, out)
				}
			}
		})
	}
}

func TestCommandCalls(t *testing.T) {
	for _, tt := range []struct {
		name    string
		text    string
		want    map[string]float64
		wantErr string
	}{
		{
			name: "every data command, those scripts ran included, summed over the nodes",
			text: "# node a\r\ncmdstat_fcall:calls=10,usec=200\r\ncmdstat_get:calls=12,usec=30\r\ncmdstat_config|resetstat:calls=1,usec=40\r\n" +
				"cmdstat_info:calls=3,usec=90\r\nused_memory:1000\r\n# node b\ncmdstat_fcall:calls=5,usec=100\ncmdstat_cluster|slots:calls=9,usec=99\n",
			want: map[string]float64{"fcall": 15, "get": 12},
		},
		{name: "none", text: "used_memory:10\n", want: map[string]float64{}},
		{name: "a bad number", text: "cmdstat_get:calls=x,usec=1\n", wantErr: "line 1: cmdstat_get: calls"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := commandCalls(tt.text)
			if wantError(t, err, tt.wantErr) {
				return
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// The Redis CPU table puts each sluice load beside the incumbent's on the
// same limits, only where both were measured, with the commands of each
// per request, most called first.
func TestRedisCPUTable(t *testing.T) {
	run := func(calls uint64, tput, redis, usec, syscalls float64, commands map[string]float64) sample {
		return sample{
			report:   loadgen.Report{CallsTotal: calls, Throughput: tput},
			cpu:      cpuFigures{Redis: redis, RedisSyscalls: &syscalls},
			redis:    redisFigures{Usec: usec, Commands: 1},
			commands: commands,
		}
	}
	sluice := map[string]float64{"fcall": 140, "get": 1000, "set": 1000, "pexpire": 2}
	inc := map[string]float64{"incrby": 3000, "expire": 3000}
	for _, tc := range []tableCase{
		{"pairs measured", map[string][]sample{
			"redis3fw": {run(1000, 20000, 0.010, 9000, 200, sluice), run(1000, 24000, 0.012, 11000, 220, sluice), run(1000, 22000, 0.014, 10000, 240, sluice)},
			"redis3":   {run(1000, 18000, 0.020, 20000, 200, sluice)},
			"inc3":     {run(1000, 10000, 0.016, 6000, 1200, inc)},
			"redis1":   {run(1000, 25000, 0.008, 6000, 200, sluice)}, // no inc1: left out
		}, []string{"redis1", "redis3", "redis3fw", "inc3"},
			[]string{
				"| load | targets | Redis CPU µs per request: sluice / incumbent |",
				"| 3 fixed-window rules on 1 descriptor (incumbent: 3 descriptors) | `redis3fw`, `inc3` | 12.0 / 16.0 | 0.75× | 2.20× | 10.0 / 6.0 | 0.22 / 1.20 | get 1.00, set 1.00, fcall 0.14; expire 3.00, incrby 3.00 |",
				"| token bucket + sliding window + fixed window on 1 descriptor (incumbent: 3 descriptors) | `redis3`, `inc3` | 20.0 / 16.0 | 1.25× | 1.80× |",
			},
			[]string{"pexpire", "`redis1`"}, true},
		{"no pair", map[string][]sample{"redis1": {run(1000, 25000, 0.008, 6000, 200, sluice)}}, []string{"redis1"}, nil, []string{"|"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkTable(t, (*runSet).redisCPUTable, tc)
		})
	}
}
