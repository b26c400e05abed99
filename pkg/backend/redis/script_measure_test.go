package redis

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// TestMeasureRedisCost measures what Redis spends per request, with INFO
// commandstats (CONFIG RESETSTAT before each run; usec of the commands a
// client sends, a script's or function's including the commands it runs),
// for the decide script in each shape, sent with EVALSHA and with FCALL, and
// for the incumbent's commands (INCRBY + EXPIRE per descriptor, in one
// pipeline per request, as envoyproxy/ratelimit sends them), and for the
// floor: a function that sends only the commands any script deciding fixed
// windows on window keys must send (floorLibrary). A request is
// one check: its descriptors, each with its rules; its limits are
// descriptors × rules, each of which costs the incumbent one descriptor.
// Every scenario decides over 10,000 descriptors (SLUICE_MEASURE_KEYS:
// fewer descriptors are decided more often, each finding its records of
// the window, as under load), admitting (the write
// path), from one client sending pipelines of 16 requests, so Redis never
// waits for the client; the scenarios alternate over rounds and the median
// is reported. It runs only with SLUICE_MEASURE=1:
//
//	SLUICE_MEASURE=1 go test -run TestMeasureRedisCost -v ./pkg/backend/redis/
//
// SLUICE_MEASURE_ROUNDS (5) and SLUICE_MEASURE_REQUESTS (20000 per run)
// change the effort. SLUICE_MEASURE_BASELINE names a file holding another
// decide script (another version's parts, joined, with the same KEYS and
// ARGV), measured beside the others with EVALSHA and, when it ends as
// scripts.DecideScript's source does, as a function library with FCALL: before and
// after from one run. SLUICE_MEASURE_ONLY keeps only the scenarios whose name holds
// it, or one of its |-separated parts.
func TestMeasureRedisCost(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("set SLUICE_MEASURE=1 to measure Redis time per decision")
	}
	rounds, requests := envInt(t, "SLUICE_MEASURE_ROUNDS", 5), envInt(t, "SLUICE_MEASURE_REQUESTS", 20000)
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	keys := envInt(t, "SLUICE_MEASURE_KEYS", 10000)
	const pipe = 16
	open := uint64(1) << 40
	fw := limit.Rule{Unit: limit.Second, Limit: open}
	mixed := []limit.Rule{
		fw,
		{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: open},
		{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: open, Burst: open},
	}
	fw3 := []limit.Rule{fw, {Unit: limit.Minute, Limit: open}, {Unit: limit.Hour, Limit: open}}
	// once is a rule of one request per hour: each descriptor's second
	// request of a run is denied (a run sends two per descriptor).
	once := func(alg limit.Algorithm) []limit.Rule {
		return []limit.Rule{{Algorithm: alg, Unit: limit.Hour, Limit: 1}}
	}
	one := func(alg limit.Algorithm) []limit.Rule {
		r := limit.Rule{Algorithm: alg, Unit: limit.Second, Limit: open}
		if alg == limit.SlidingLog {
			r.Limit = 1000
		}
		return []limit.Rule{r}
	}
	type scenario struct {
		name        string
		descriptors int // descriptors per request (each its own key)
		limits      int // limits per request: descriptors × rules
		send        func(p goredis.Pipeliner, key int)
	}
	lib := scripts.DecideLibrary()
	// run sends one decide call, with EVALSHA or FCALL.
	run := func(p goredis.Pipeliner, fcall bool, keys []string, args ...any) {
		if fcall {
			p.FCall(ctx, lib.Function, keys, args...)
			return
		}
		p.EvalSha(ctx, scripts.DecideScript().SHA1, keys, args...)
	}
	// decideSets builds one request: descriptors descriptors, the d-th of
	// the rules sets[d % len(sets)], in one call (batch) or one call each,
	// sent with EVALSHA or FCALL. A batch's descriptor of the same rules as
	// the one before is a repeat item, as the Redis backend sends it,
	// unless full is set (a baseline script may not read them).
	decideSets := func(sets [][]limit.Rule, descriptors int, batch, fcall, full bool) func(p goredis.Pipeliner, key int) {
		prepared := make([][]*ruleArgs, len(sets))
		for s, rules := range sets {
			for _, r := range rules {
				a, err := prepareRule(r)
				if err != nil {
					t.Fatal(err)
				}
				prepared[s] = append(prepared[s], a)
			}
		}
		clock := scriptClock{}
		return func(p goredis.Pipeliner, key int) {
			var ks []string
			var args []any
			if batch {
				args = appendBatchHead(args, clock)
			}
			for d := range descriptors {
				id := fmt.Sprintf("m%d|k=%d", d, key)
				rules := prepared[d%len(prepared)]
				var err error
				k0 := len(ks)
				if ks, err = appendKeys(ks, "", id, rules); err != nil {
					t.Fatal(err)
				}
				if batch {
					if d > 0 && !full && len(prepared) == 1 {
						args = appendRepeatItem(args)
						continue
					}
					args = appendBatchItem(args, len(ks)-k0, limit.Cost{N: 1}, rules, clock)
					continue
				}
				a := appendHead(nil, limit.Cost{N: 1}, clock)
				for _, r := range rules {
					a = r.appendTo(a, clock)
				}
				run(p, fcall, ks[k0:], a...)
			}
			if batch {
				run(p, fcall, ks, args...)
			}
		}
	}
	// decide is decideSets of one set: every descriptor of rules.
	decide := func(rules []limit.Rule, descriptors int, batch, fcall, full bool) func(p goredis.Pipeliner, key int) {
		return decideSets([][]limit.Rule{rules}, descriptors, batch, fcall, full)
	}
	// perUnit is the incumbent's configuration of the descriptors
	// scenarios: one fixed window per descriptor, per second, minute and
	// hour in turn.
	perUnit := [][]limit.Rule{{fw}, {{Unit: limit.Minute, Limit: open}}, {{Unit: limit.Hour, Limit: open}}}
	incumbent := func(descriptors int) func(p goredis.Pipeliner, key int) {
		return func(p goredis.Pipeliner, key int) {
			win := time.Now().Unix()
			for d := range descriptors {
				k := fmt.Sprintf("bench_m%d_%d_%d", d, key, win)
				p.IncrBy(ctx, k, 1)
				p.Expire(ctx, k, time.Second+time.Duration(key%300)*time.Second)
			}
		}
	}
	fw1 := []limit.Rule{fw}
	scenarios := []scenario{
		{"incumbent, 1 descriptor (INCRBY+EXPIRE)", 1, 1, incumbent(1)},
		{"incumbent, 3 descriptors (6 commands)", 3, 3, incumbent(3)},
	}
	for _, fcall := range []bool{false, true} {
		via := "EVALSHA"
		if fcall {
			via = "FCALL"
		}
		scenarios = append(scenarios,
			scenario{"sluice " + via + ", 1 fixed window", 1, 1, decide(fw1, 1, false, fcall, false)},
			scenario{"sluice " + via + ", 1 sliding window", 1, 1, decide(one(limit.SlidingWindow), 1, false, fcall, false)},
			scenario{"sluice " + via + ", 1 token bucket", 1, 1, decide(one(limit.TokenBucket), 1, false, fcall, false)},
			scenario{"sluice " + via + ", 1 sliding log", 1, 1, decide(one(limit.SlidingLog), 1, false, fcall, false)},
			scenario{"sluice " + via + ", 1 sliding window, half denied", 1, 1, decide(once(limit.SlidingWindow), 1, false, fcall, false)},
			scenario{"sluice " + via + ", 1 token bucket, half denied", 1, 1, decide(once(limit.TokenBucket), 1, false, fcall, false)},
			scenario{"sluice " + via + ", 3 fixed windows, 1 descriptor", 1, 3, decide(fw3, 1, false, fcall, false)},
			scenario{"sluice " + via + ", 3 mixed rules, 1 descriptor", 1, 3, decide(mixed, 1, false, fcall, false)},
			scenario{"sluice " + via + ", 3 descriptors of 1 fixed window, 3 calls", 3, 3, decide(fw1, 3, false, fcall, false)},
			scenario{"sluice " + via + ", 3 descriptors of 1 fixed window, 1 batch", 3, 3, decide(fw1, 3, true, fcall, false)},
			scenario{"sluice " + via + ", 10 descriptors of 1 fixed window, 1 batch", 10, 10, decide(fw1, 10, true, fcall, false)},
			scenario{"sluice " + via + ", 3 descriptors of 1 fixed window each (second, minute, hour), 1 batch", 3, 3, decideSets(perUnit, 3, true, fcall, false)},
			scenario{"sluice " + via + ", 10 descriptors of 1 fixed window each (second, minute, hour in turn), 1 batch", 10, 10, decideSets(perUnit, 10, true, fcall, false)},
		)
	}
	// The floor: a function that only sends the commands any decision of
	// fixed windows on window keys needs (TIME once per call; per rule an
	// INCRBY of its window key, and an EXPIREAT when that made the key), with
	// one integer per descriptor for a reply, and nothing else: no check,
	// no putting back, no remaining or reset. What no script deciding these
	// rules on Redis can go below (floorLibrary).
	floor := func(rules, descriptors int) func(p goredis.Pipeliner, key int) {
		return func(p goredis.Pipeliner, key int) {
			ks := make([]string, descriptors)
			for d := range ks {
				ks[d] = fmt.Sprintf("{floor%d|k=%d}", d, key)
			}
			p.FCall(ctx, "sluice_floor", ks, rules, 1)
		}
	}
	floorHash := func(rules, descriptors int) func(p goredis.Pipeliner, key int) {
		return func(p goredis.Pipeliner, key int) {
			ks := make([]string, descriptors)
			for d := range ks {
				ks[d] = fmt.Sprintf("{floorh%d|k=%d}", d, key)
			}
			p.FCall(ctx, "sluice_floor_hash", ks, rules, 1)
		}
	}
	fw10x3 := decide(fw3, 10, true, true, false)
	scenarios = append(scenarios,
		scenario{"sluice FCALL, 10 descriptors of 3 fixed windows, 1 batch", 10, 30, fw10x3},
		scenario{"floor FCALL, 1 fixed window", 1, 1, floor(1, 1)},
		scenario{"floor FCALL, 3 fixed windows, 1 descriptor", 1, 3, floor(3, 1)},
		scenario{"floor FCALL, 10 descriptors of 1 fixed window, 1 batch", 10, 10, floor(1, 10)},
		scenario{"floor FCALL, 10 descriptors of 3 fixed windows, 1 batch", 10, 30, floor(3, 10)},
		scenario{"floor hash FCALL, 1 fixed window", 1, 1, floorHash(1, 1)},
		scenario{"floor hash FCALL, 3 fixed windows, 1 descriptor", 1, 3, floorHash(3, 1)},
		scenario{"floor hash FCALL, 10 descriptors of 1 fixed window, 1 batch", 10, 10, floorHash(1, 10)},
	)
	if err := c.FunctionLoad(ctx, floorLibrary).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.FunctionLoad(ctx, lib.Source).Err(); err != nil {
		t.Fatal(err)
	}
	if path := os.Getenv("SLUICE_MEASURE_BASELINE"); path != "" {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sha, err := c.ScriptLoad(ctx, string(src)).Result()
		if err != nil {
			t.Fatalf("SLUICE_MEASURE_BASELINE: %v", err)
		}
		base := func(rules []limit.Rule, descriptors int, batch bool) func(p goredis.Pipeliner, key int) {
			send := decide(rules, descriptors, batch, false, true)
			return func(p goredis.Pipeliner, key int) { send(&shaPipe{p, sha}, key) }
		}
		scenarios = append(scenarios,
			scenario{"baseline EVALSHA, 1 fixed window", 1, 1, base(fw1, 1, false)},
			scenario{"baseline EVALSHA, 1 sliding window", 1, 1, base(one(limit.SlidingWindow), 1, false)},
			scenario{"baseline EVALSHA, 1 token bucket", 1, 1, base(one(limit.TokenBucket), 1, false)},
			scenario{"baseline EVALSHA, 1 sliding log", 1, 1, base(one(limit.SlidingLog), 1, false)},
			scenario{"baseline EVALSHA, 3 fixed windows, 1 descriptor", 1, 3, base(fw3, 1, false)},
			scenario{"baseline EVALSHA, 3 mixed rules, 1 descriptor", 1, 3, base(mixed, 1, false)},
			scenario{"baseline EVALSHA, 3 descriptors of 1 fixed window, 1 batch", 3, 3, base(fw1, 3, true)},
			scenario{"baseline EVALSHA, 10 descriptors of 1 fixed window, 1 batch", 10, 10, base(fw1, 10, true)},
		)
		if parts, ok := strings.CutSuffix(string(src), evalTail); ok {
			blib := newLibrary(parts, sha)
			if err := c.FunctionLoadReplace(ctx, blib.Source).Err(); err != nil {
				t.Fatalf("SLUICE_MEASURE_BASELINE as a function library: %v", err)
			}
			basefSets := func(sets [][]limit.Rule, descriptors int) func(p goredis.Pipeliner, key int) {
				send := decideSets(sets, descriptors, true, true, true)
				return func(p goredis.Pipeliner, key int) { send(&fnPipe{p, blib.Function}, key) }
			}
			basef := func(rules []limit.Rule, descriptors int, batch bool) func(p goredis.Pipeliner, key int) {
				send := decide(rules, descriptors, batch, true, true)
				return func(p goredis.Pipeliner, key int) { send(&fnPipe{p, blib.Function}, key) }
			}
			scenarios = append(scenarios,
				scenario{"baseline FCALL, 1 fixed window", 1, 1, basef(fw1, 1, false)},
				scenario{"baseline FCALL, 1 sliding window", 1, 1, basef(one(limit.SlidingWindow), 1, false)},
				scenario{"baseline FCALL, 1 token bucket", 1, 1, basef(one(limit.TokenBucket), 1, false)},
				scenario{"baseline FCALL, 1 sliding log", 1, 1, basef(one(limit.SlidingLog), 1, false)},
				scenario{"baseline FCALL, 1 sliding window, half denied", 1, 1, basef(once(limit.SlidingWindow), 1, false)},
				scenario{"baseline FCALL, 1 token bucket, half denied", 1, 1, basef(once(limit.TokenBucket), 1, false)},
				scenario{"baseline FCALL, 3 fixed windows, 1 descriptor", 1, 3, basef(fw3, 1, false)},
				scenario{"baseline FCALL, 3 mixed rules, 1 descriptor", 1, 3, basef(mixed, 1, false)},
				scenario{"baseline FCALL, 3 descriptors of 1 fixed window, 1 batch", 3, 3, basef(fw1, 3, true)},
				scenario{"baseline FCALL, 10 descriptors of 1 fixed window, 1 batch", 10, 10, basef(fw1, 10, true)},
				scenario{"baseline FCALL, 3 descriptors of 1 fixed window each (second, minute, hour), 1 batch", 3, 3, basefSets(perUnit, 3)},
				scenario{"baseline FCALL, 10 descriptors of 1 fixed window each (second, minute, hour in turn), 1 batch", 10, 10, basefSets(perUnit, 10)},
				scenario{"baseline FCALL, 10 descriptors of 3 fixed windows, 1 batch", 10, 30, func() func(p goredis.Pipeliner, key int) {
					send := decide(fw3, 10, true, true, false) // with repeat items, as the sluice scenario
					return func(p goredis.Pipeliner, key int) { send(&fnPipe{p, blib.Function}, key) }
				}()},
			)
		}
	}
	if err := c.ScriptLoad(ctx, scripts.DecideScript().Source).Err(); err != nil {
		t.Fatal(err)
	}
	if only := os.Getenv("SLUICE_MEASURE_ONLY"); only != "" {
		alts := strings.Split(only, "|")
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool {
			return !slices.ContainsFunc(alts, func(a string) bool { return strings.Contains(s.name, a) })
		})
	}
	usec := make([][]float64, len(scenarios)) // per request
	cpu := make([][]float64, len(scenarios))  // per request
	mem := make([]float64, len(scenarios))
	for round := range rounds {
		for i, s := range scenarios {
			if err := c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			before := usedMemory(t, c)
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			cpu0 := mainThreadCPU(t, c)
			for r := 0; r < requests; r += pipe {
				p := c.Pipeline()
				for k := r; k < r+pipe; k++ {
					s.send(p, k%keys)
				}
				if _, err := p.Exec(ctx); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
			}
			u := clientUsec(t, c)
			usec[i] = append(usec[i], u/float64(requests))
			cpu[i] = append(cpu[i], (mainThreadCPU(t, c)-cpu0)/float64(requests))
			if round == 0 {
				mem[i] = (usedMemory(t, c) - before) / float64(min(keys, requests)*s.descriptors)
			}
		}
	}
	// A request is one check: its descriptors, each with its rules. Its
	// limits are descriptors × rules, what the incumbent needs one
	// descriptor (two commands) each for.
	var b strings.Builder
	fmt.Fprintf(&b, "\n| scenario | limits per request | Redis command µs per request (median of %d; all rounds) | per limit | Redis main-thread CPU µs per request (median) | per limit | requests/s per shard at 100%% CPU | Redis memory per descriptor right after, bytes |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", rounds)
	median := func(v []float64) float64 {
		m := slices.Clone(v)
		slices.Sort(m)
		return m[len(m)/2]
	}
	for i, s := range scenarios {
		med, cmed := median(usec[i]), median(cpu[i])
		var all []string
		for _, u := range usec[i] {
			all = append(all, strconv.FormatFloat(u, 'f', 2, 64))
		}
		lim := float64(s.limits)
		fmt.Fprintf(&b, "| %s | %d | %.2f (%s) | %.2f | %.2f | %.2f | %.0f | %.0f |\n",
			s.name, s.limits, med, strings.Join(all, ", "), med/lim, cmed, cmed/lim, 1e6/cmed, mem[i])
	}
	t.Log(b.String())
}

// floorLibrary is the floor scenarios' function, sluice_floor: KEYS are
// descriptors, ARGV[1] the number of fixed-window rules each has (periods of
// a second, a minute, an hour, a day... in turn), ARGV[2] the cost. It reads
// TIME once, then per descriptor and rule INCRBYs the rule's window key
// (the key, the rule's number, the window's start) and EXPIREATs it at the
// window's end when the INCRBY made it, and replies one integer per
// descriptor. Nothing a decision needs beyond those commands: it checks no
// limit and puts nothing back. sluice_floor_hash is the same with one
// declared key per descriptor: a hash whose field per rule and window is
// HINCRBYed, the rule's previous window's field deleted and the key's
// expiry set when the HINCRBY made the field -- one command per rule in a
// window's steady state.
const floorLibrary = `#!lua name=sluice_floor
local periods = { 1, 60, 3600, 86400, 604800, 2592000 }
redis.register_function('sluice_floor', function(KEYS, ARGV)
  local call = redis.call
  local t = call('TIME')
  local now = tonumber(t[1])
  local nr, ns = tonumber(ARGV[1]), ARGV[2]
  local n = tonumber(ns)
  local tails, ends = {}, {}
  for j = 1, nr do
    local P = periods[j]
    local start = now - now % P
    tails[j], ends[j] = ':' .. j .. ':' .. start, start + P
  end
  local out = {}
  for i = 1, #KEYS do
    local base = KEYS[i]
    for j = 1, nr do
      local key = base .. tails[j]
      if call('INCRBY', key, ns) == n then call('EXPIREAT', key, ends[j]) end
    end
    out[i] = 1
  end
  return out
end)
redis.register_function('sluice_floor_hash', function(KEYS, ARGV)
  local call = redis.call
  local t = call('TIME')
  local now = tonumber(t[1])
  local nr, ns = tonumber(ARGV[1]), ARGV[2]
  local n = tonumber(ns)
  local fields, olds, ends = {}, {}, {}
  for j = 1, nr do
    local P = periods[j]
    local start = now - now % P
    fields[j], olds[j], ends[j] = j .. ':' .. start, j .. ':' .. (start - P), start + P
  end
  local out = {}
  for i = 1, #KEYS do
    local key = KEYS[i]
    for j = 1, nr do
      if call('HINCRBY', key, fields[j], ns) == n then
        call('HDEL', key, olds[j])
        call('EXPIREAT', key, ends[nr])
      end
    end
    out[i] = 1
  end
  return out
end)
`

// shaPipe sends every EVALSHA of a pipeline to another script: sha.
type shaPipe struct {
	goredis.Pipeliner
	sha string
}

func (p *shaPipe) EvalSha(ctx context.Context, _ string, keys []string, args ...any) *goredis.Cmd {
	return p.Pipeliner.EvalSha(ctx, p.sha, keys, args...)
}

// fnPipe sends every FCALL of a pipeline to another function: name.
type fnPipe struct {
	goredis.Pipeliner
	name string
}

func (p *fnPipe) FCall(ctx context.Context, _ string, keys []string, args ...any) *goredis.Cmd {
	return p.Pipeliner.FCall(ctx, p.name, keys, args...)
}

// clientUsec sums commandstats' usec over the commands clients send: the
// scripts when any ran (a script's usec holds the commands it ran, which
// commandstats also lists), else every data command.
func clientUsec(t *testing.T, c *goredis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var all, scripts float64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		if cmd == "config" || cmd == "info" || cmd == "flushall" || cmd == "script" || cmd == "ping" || cmd == "hello" || cmd == "client" || strings.HasPrefix(cmd, "function") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, _ := strconv.ParseFloat(v, 64)
				all += u
				if cmd == "evalsha" || cmd == "eval" || cmd == "fcall" {
					scripts += u
				}
			}
		}
	}
	if scripts > 0 {
		return scripts
	}
	return all
}

// mainThreadCPU reads the CPU time, in µs, Redis's main thread has used
// (user + system; INFO cpu, Redis 6.2+): unlike commandstats' usec, it does
// not grow while Redis waits for a core on a busy machine, and it holds
// what commandstats leaves out (reading requests, writing replies).
func mainThreadCPU(t *testing.T, c *goredis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user_main_thread" || name == "used_cpu_sys_main_thread") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
			n++
		}
	}
	if n != 2 {
		t.Fatal("no main thread CPU in INFO cpu (Redis 6.2+)")
	}
	return sum * 1e6
}

func usedMemory(t *testing.T, c *goredis.Client) float64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
