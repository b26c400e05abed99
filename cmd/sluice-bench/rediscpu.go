package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// commandCalls reads the calls of every data command from what
// measure.sh's redis_info wrote (INFO commandstats of each node), summed
// over the nodes: the commands scripts ran are counted under their own
// names too. Admin commands (adminCommands) are left out.
func commandCalls(text string) (map[string]float64, error) {
	calls := make(map[string]float64)
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		if base, _, _ := strings.Cut(cmd, "|"); adminCommands[base] {
			continue
		}
		fields, err := infoFields(value)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", line, name, err)
		}
		calls[cmd] += fields["calls"]
	}
	return calls, sc.Err()
}

// redisCPUPair is one load measured for sluice and for the incumbent.
type redisCPUPair struct{ label, sluice, inc string }

// redisCPUPairs are the loads the Redis CPU table compares, each sluice
// target beside the incumbent's on the same limits.
var redisCPUPairs = []redisCPUPair{
	{"1 descriptor, 1 fixed window", "redis1", "inc1"},
	{"3 fixed-window rules on 1 descriptor (incumbent: 3 descriptors)", "redis3fw", "inc3"},
	{"token bucket + sliding window + fixed window on 1 descriptor (incumbent: 3 descriptors)", "redis3", "inc3"},
	{"3 descriptors, 1 fixed window each", "redis3d", "inc3"},
	{"5 descriptors, 1 fixed window each", "redis5d", "inc5"},
	{"10 descriptors, 1 fixed window each", "redis10d", "inc10"},
	{"attack mix (30% of requests on 4 hot keys)", "attack", "incattack"},
	{"Redis Cluster of 3 masters, 1 descriptor", "redis1cl", "inc1cl"},
	{"Redis Cluster of 3 masters, 3 descriptors", "redis3dcl", "inc3cl"},
}

// redisSyscalls is redis-server's read and write system calls per request
// (every node), 0 when the run did not count them.
func redisSyscalls(s sample) float64 {
	if s.cpu.RedisSyscalls == nil {
		return 0
	}
	return s.perRequest(*s.cpu.RedisSyscalls) / 1e6
}

// commandsPerRequest formats the median calls per request of every
// command INFO commandstats counted in name's runs, most called first:
// "fcall 0.14, get 1.00, set 1.00".
func (rs *runSet) commandsPerRequest(name string) string {
	ss := rs.runs[name]
	seen := make(map[string]bool)
	for _, s := range ss {
		for cmd := range s.commands {
			seen[cmd] = true
		}
	}
	type count struct {
		cmd string
		n   float64
	}
	var counts []count
	for cmd := range seen {
		n := median(ss, func(s sample) float64 { return s.perRequest(s.commands[cmd]) / 1e6 })
		if n >= 0.005 {
			counts = append(counts, count{cmd, n})
		}
	}
	if len(counts) == 0 {
		return "—"
	}
	slices.SortFunc(counts, func(a, b count) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.cmd, b.cmd)
	})
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%s %.2f", c.cmd, c.n)
	}
	return strings.Join(parts, ", ")
}

// redisCPUTable compares redis-server's CPU per request, sluice against
// the incumbent, on every load measured for both: what one shard's core
// holds. Beside it, throughput, the time INFO commandstats counted inside
// commands, redis-server's system calls and the commands per request.
func (rs *runSet) redisCPUTable(w io.Writer) bool {
	wrote := false
	for _, p := range redisCPUPairs {
		if !rs.has(p.sluice) || !rs.has(p.inc) {
			continue
		}
		if !wrote {
			fmt.Fprintln(w, "| load | targets | Redis CPU µs per request: sluice / incumbent | sluice ÷ incumbent | req/s: sluice ÷ incumbent | Redis µs inside commands per request: sluice / incumbent | redis-server reads + writes per request: sluice / incumbent | Redis commands per request (`INFO commandstats`), sluice; incumbent |")
			fmt.Fprintln(w, "|---|---|---|---:|---:|---|---|---|")
			wrote = true
		}
		a, b := rs.med(p.sluice, redisCPU), rs.med(p.inc, redisCPU)
		syscalls := func(name string) string {
			if n := rs.med(name, redisSyscalls); n > 0 {
				return fmt.Sprintf("%.2f", n)
			}
			return "—"
		}
		fmt.Fprintf(w, "| %s | `%s`, `%s` | %.1f / %.1f | %s | %s | %.1f / %.1f | %s / %s | %s; %s |\n", p.label, p.sluice, p.inc,
			a, b, ratio(a, b), ratio(rs.med(p.sluice, throughput), rs.med(p.inc, throughput)),
			rs.med(p.sluice, redisUsecPerRequest), rs.med(p.inc, redisUsecPerRequest),
			syscalls(p.sluice), syscalls(p.inc), rs.commandsPerRequest(p.sluice), rs.commandsPerRequest(p.inc))
	}
	return wrote
}
