package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// redisFigures is what Redis reported for one run, summed over the nodes
// of the run's Redis (one, or every master of a cluster).
type redisFigures struct {
	// Nodes is how many nodes reported.
	Nodes int
	// Usec and Commands are the time INFO commandstats counted in the data
	// commands clients sent, and how many there were. When scripts or
	// functions ran (sluice), they are the only ones counted: the commands
	// a script runs are listed on their own too, and their time is inside
	// the script's.
	Usec, Commands float64
	// Scripts counts the script and function calls.
	Scripts float64
	// Memory is used_memory; Keys the keys of every database.
	Memory, Keys float64
}

// adminCommands are the commands that are not a decision's work: the
// benchmark's own reads and resets and the clients' connection set-up and
// topology queries (matched on the command's name before any '|').
var adminCommands = map[string]bool{
	"auth": true, "client": true, "cluster": true, "command": true, "config": true, "dbsize": true,
	"flushall": true, "flushdb": true, "function": true, "hello": true, "info": true, "ping": true,
	"readonly": true, "script": true, "select": true,
}

// scriptCommands run a script or a function.
var scriptCommands = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true,
}

// parseRedisInfo reads what measure.sh's redis_info wrote: for each node a
// line "# node ADDR" followed by its INFO commandstats, memory and
// keyspace sections.
func parseRedisInfo(text string) (redisFigures, error) {
	var f redisFigures
	var all, scripts struct{ usec, calls float64 }
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		name, value, ok := strings.Cut(l, ":")
		switch {
		case strings.HasPrefix(l, "# node "):
			f.Nodes++
		case !ok || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(name, "cmdstat_"):
			cmd := strings.TrimPrefix(name, "cmdstat_")
			fields, err := infoFields(value)
			if err != nil {
				return f, fmt.Errorf("line %d: %s: %w", line, name, err)
			}
			if base, _, _ := strings.Cut(cmd, "|"); adminCommands[base] {
				continue
			}
			all.usec += fields["usec"]
			all.calls += fields["calls"]
			if scriptCommands[cmd] {
				scripts.usec += fields["usec"]
				scripts.calls += fields["calls"]
			}
		case name == "used_memory":
			n, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return f, fmt.Errorf("line %d: used_memory: %w", line, err)
			}
			f.Memory += n
		case strings.HasPrefix(name, "db") && strings.Contains(value, "keys="):
			fields, err := infoFields(value)
			if err != nil {
				return f, fmt.Errorf("line %d: %s: %w", line, name, err)
			}
			f.Keys += fields["keys"]
		}
	}
	if err := sc.Err(); err != nil {
		return f, err
	}
	f.Scripts = scripts.calls
	if scripts.calls > 0 {
		f.Usec, f.Commands = scripts.usec, scripts.calls
	} else {
		f.Usec, f.Commands = all.usec, all.calls
	}
	return f, nil
}

// infoFields parses "a=1,b=2.5" into numbers.
func infoFields(s string) (map[string]float64, error) {
	out := make(map[string]float64)
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = n
	}
	return out, nil
}

// metricSum sums the samples of one metric in Prometheus's text format
// whose labels include every label="value" of want (none: every sample).
func metricSum(text, name string, want ...string) (float64, error) {
	sum := 0.0
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			return 0, fmt.Errorf("metrics line %d: no value", i+1)
		}
		metric, labels, _ := strings.Cut(series, "{")
		if metric != name || !hasLabels(labels, want) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %d: %w", i+1, err)
		}
		sum += v
	}
	return sum, nil
}

// hasLabels reports whether a series' labels (`a="x",b="y"}`) hold every
// label="value" of want.
func hasLabels(labels string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(","+strings.TrimSuffix(labels, "}")+",", ","+w+",") {
			return false
		}
	}
	return true
}
