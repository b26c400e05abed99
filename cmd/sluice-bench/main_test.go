package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/loadgen"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

func TestRunAgainstNoop(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := loadgen.NewNoopServer()
	go srv.Serve(lis)
	defer srv.Stop()

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", lis.Addr().String(), "--requests", "300", "--warmup", "0",
		"-c", "4", "--conns", "2", "--descriptor", "remote_address={ip}", "--descriptor", "user={id},path=/api",
		"--attack-keys", "2", "--attack-share", "0.3"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("stdout holds %d lines, want one JSON line: %q", len(lines), stdout.String())
	}
	var r loadgen.Report
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatal(err)
	}
	if r.Requests != 300 || r.OK != 300 || len(r.Descriptors) != 2 || r.Attack.Requests == 0 {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(stderr.String(), "req/s") || !strings.Contains(stderr.String(), "p99") {
		t.Errorf("no summary on stderr: %q", stderr.String())
	}
}

// TestNoopCommand: the no-op server answers a run's calls; with --redis,
// each only after a Redis round trip, shared by calls waiting together.
func TestNoopCommand(t *testing.T) {
	srv := redistest.Standalone(t)
	client := srv.Client()
	for _, tt := range []struct {
		name  string
		flags []string
		echo  bool // the calls reached Redis
	}{
		{"plain", nil, false},
		{"one Redis round trip per call", []string{"--redis", srv.Addr(), "--lanes", "2"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := redistest.CommandCalls(t, client)["echo"]
			r, w := io.Pipe()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, append([]string{"noop", "--addr", "127.0.0.1:0"}, tt.flags...), io.Discard, w)
				w.Close()
			}()
			line, err := bufio.NewReader(r).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, r)
			addr := strings.TrimSpace(line[strings.LastIndex(line, " "):])
			var stdout bytes.Buffer
			if code := run(ctx, []string{"--addr", addr, "--requests", "50", "--warmup", "0", "--quiet"}, &stdout, io.Discard); code != 0 {
				t.Fatalf("run against noop: exit %d", code)
			}
			if !strings.Contains(stdout.String(), `"ok":50`) {
				t.Errorf("report %s", stdout.String())
			}
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("noop exited %d", code)
			}
			echo := redistest.CommandCalls(t, client)["echo"] - before
			if got := echo > 0; got != tt.echo || echo > 50 {
				t.Errorf("%d ECHO round trips for 50 calls", echo)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"frobnicate"}, 2},
		{[]string{"--no-such-flag"}, 2},
		{[]string{"--descriptor", "k={bad}"}, 1},
		{[]string{"--dist", "pareto"}, 1},
		{[]string{"noop", "--addr", "0.0.0.0:0"}, 1},
		{[]string{"noop", "--addr", "127.0.0.1:0", "--redis", "10.0.0.1:6379"}, 1},
		{[]string{"noop", "--addr", "127.0.0.1:0", "--redis", "127.0.0.1:6379", "--lanes", "0"}, 1},
		{[]string{"run", "extra"}, 1},
		{[]string{"-h"}, 0},
	} {
		if code := run(context.Background(), tt.args, io.Discard, io.Discard); code != tt.code {
			t.Errorf("%q: exit %d, want %d", tt.args, code, tt.code)
		}
	}
}

// writeFiles writes name -> body into dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// summarizeOut runs summarize with args and returns its output.
func summarizeOut(t *testing.T, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	if code := run(context.Background(), append([]string{"summarize"}, args...), &out, &errs); code != 0 {
		t.Fatalf("summarize %q: exit %d: %s", args, code, errs.String())
	}
	return out.String()
}

func TestSummarize(t *testing.T) {
	dir := t.TempDir()
	for i, tput := range []string{"1000", "3000", "2000"} {
		round := strconv.Itoa(i + 1)
		writeFiles(t, dir, map[string]string{
			"noop." + round + ".json":       `{"throughput_rps":` + tput + `,"latency_ms":{"p99":1}}`,
			"memory." + round + ".json":     `{"throughput_rps":` + tput + `0,"calls_total":1000000,"latency_ms":{"p99":2}}`,
			"memory." + round + ".cpu.json": `{"wall_s":2,"server_cpu_s":1,"redis_cpu_s":0,"client_cpu_s":0.5,"others_cpu_s":0.2,"server_peak_rss_bytes":` + round + `4000000}`,
		})
	}
	out := summarizeOut(t, "--only", "runs", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || lines[0] != startMarker("runs") || lines[5] != endMarker ||
		!strings.HasPrefix(lines[3], "| noop | 2000 | — | 1.00 | 0.0 | 0.0 | 0.000 | — | — |") ||
		!strings.HasPrefix(lines[4], "| memory | 20000 | 1000% | 2.00 | 1.0 | 0.0 | 0.000 | — | 24 | 10000 (2.00) [0.50 / 0.00 / 0.25 / 0.10];") {
		t.Errorf("summary:\n%s", out)
	}
	if code := run(context.Background(), []string{"summarize", t.TempDir()}, io.Discard, io.Discard); code != 1 {
		t.Errorf("empty directory: exit %d, want 1", code)
	}
	if code := run(context.Background(), []string{"summarize", "--only", "nosuchblock", dir}, io.Discard, io.Discard); code != 1 {
		t.Errorf("--only with an unknown block: exit %d, want 1", code)
	}

	// A run cut short (its report half written, no CPU file yet) is left
	// out, loudly; a broken report of a finished run is an error.
	writeFiles(t, dir, map[string]string{"memory.4.json": `{"throughput_rps":9`})
	var partial, warn bytes.Buffer
	if code := run(context.Background(), []string{"summarize", "--only", "runs", dir}, &partial, &warn); code != 0 ||
		partial.String() != out || !strings.Contains(warn.String(), "leaving out") || !strings.Contains(warn.String(), "memory.4.json") {
		t.Errorf("with an unfinished run: exit %d, stderr %q, summary:\n%s", code, warn.String(), partial.String())
	}
	writeFiles(t, dir, map[string]string{"memory.4.cpu.json": `{}`})
	if code := run(context.Background(), []string{"summarize", dir}, io.Discard, io.Discard); code != 1 {
		t.Errorf("a finished run's broken report: exit %d, want 1", code)
	}
	for _, f := range []string{"memory.4.json", "memory.4.cpu.json"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}

	// The same runs measured as separate rounds, one directory each (as
	// ab.sh writes them), merge into the same table.
	var dirs []string
	for round := 1; round <= 3; round++ {
		d := t.TempDir()
		dirs = append(dirs, d)
		for _, name := range []string{"memory." + strconv.Itoa(round) + ".json", "memory." + strconv.Itoa(round) + ".cpu.json", "noop." + strconv.Itoa(round) + ".json"} {
			body, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			// Every round directory of measure.sh numbers its run 1.
			writeFiles(t, d, map[string]string{strings.Replace(name, "."+strconv.Itoa(round)+".", ".1.", 1): string(body)})
		}
	}
	if merged := summarizeOut(t, append([]string{"--only", "runs"}, dirs...)...); merged != out {
		t.Errorf("merged rounds:\n%s\nwant the one-directory summary:\n%s", merged, out)
	}
}

func TestLocalShare(t *testing.T) {
	var s sample
	s.report.Requests, s.report.CallsTotal = 1000, 2000 // half the calls were warm-up
	s.report.Normal.Requests = 700
	s.report.Attack = loadgen.Split{Requests: 300, OverLimit: 280}
	s.redis.Scripts = 2 * (700 + 20 + 28) // 28 of 280 denials reached Redis
	if got := localShare(s); got < 0.8999 || got > 0.9001 {
		t.Errorf("local share from script calls %v, want 0.9", got)
	}
	// Fewer script calls than admitted descriptors: calls decided several,
	// and the estimate does not hold.
	s.redis.Scripts = 2 * 700
	if got := localShare(s); got != -1 {
		t.Errorf("local share from too few script calls %v, want -1 (unknown)", got)
	}
	// sluice's own counters, when the run has them, are exact even when
	// one script call decides many descriptors.
	s.metrics = "# HELP sluice_denycache_hits_total x\nsluice_denycache_hits_total 450\n" +
		`sluice_decisions_total{domain="bench",outcome="ok"} 1400` + "\n" +
		`sluice_decisions_total{domain="bench",outcome="over_limit"} 500` + "\n" +
		`sluice_decisions_total{domain="other",outcome="over_limit"} 100` + "\n"
	if got := localShare(s); got < 0.7499 || got > 0.7501 {
		t.Errorf("local share from metrics %v, want 0.75", got)
	}
}

func TestMetricSum(t *testing.T) {
	text := "# TYPE a_total counter\na_total{x=\"1\",y=\"2\"} 3\na_total{x=\"1\",y=\"3\"} 4\na_total{x=\"2\"} 5e0\nab_total 100\nb 7 1700000000\n"
	for _, tt := range []struct {
		name string
		want []string
		sum  float64
	}{
		{"a_total", nil, 12},
		{"a_total", []string{`x="1"`}, 7},
		{"a_total", []string{`x="1"`, `y="3"`}, 4},
		{"a_total", []string{`x="3"`}, 0},
		{"b", nil, 7},
		{"c", nil, 0},
	} {
		if got, err := metricSum(text, tt.name, tt.want...); err != nil || got != tt.sum {
			t.Errorf("%s %q: %v (%v), want %v", tt.name, tt.want, got, err, tt.sum)
		}
	}
	for _, bad := range []string{"a_total\n", "a_total notanumber\n"} {
		if _, err := metricSum(bad, "a_total"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestSummarizeRedisTable: the scenario tables divide Redis's command
// time and commands by the descriptors decided (calls × descriptors per
// call), and the memory the run added by the descriptors it made active;
// runs recorded before measure.sh kept INFO read the figures of the CPU
// file.
func TestSummarizeRedisTable(t *testing.T) {
	report := `{"throughput_rps":100,"calls_total":1000,"keys":1000,"descriptors":["a={ip}","b={ip}","c={ip}"],"latency_ms":{"p50":1,"p99":2,"p999":3}}`
	info := func(usec, calls, memory, keys int) string {
		return fmt.Sprintf("# node 127.0.0.1:1\ncmdstat_incrby:calls=%d,usec=%d,usec_per_call=1\ncmdstat_expire:calls=%d,usec=%d,usec_per_call=1\n"+
			"used_memory:%d\ndb0:keys=%d,expires=0,avg_ttl=0\n", calls/2, usec/2, calls/2, usec/2, memory, keys)
	}
	const want = "| incumbent, 3 descriptors | `inc3` | 100 | — | — | 1.00 / 2.00 / 3.00 | 300.0 / 100.0 / 50.0 | 2.00 | 2.00 | 3,000 | 600 |"
	for _, tt := range []struct {
		name  string
		files map[string]string
	}{
		{"INFO", map[string]string{
			"inc3.1.json":            report,
			"inc3.1.cpu.json":        `{"wall_s":1,"server_cpu_s":0.3,"redis_cpu_s":0.1,"client_cpu_s":0.05}`,
			"inc3.1.redis-start.txt": info(0, 0, 200000, 0),
			"inc3.1.redis.txt":       info(6000, 6000, 2000000, 3000),
		}},
		{"older CPU file", map[string]string{
			"inc3.1.json":     report,
			"inc3.1.cpu.json": `{"wall_s":1,"server_cpu_s":0.3,"redis_cpu_s":0.1,"client_cpu_s":0.05,"redis_usec":6000,"redis_commands":6000,"redis_used_memory":1800000,"redis_keys":3000}`,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			if out := summarizeOut(t, "--only", "three-limits", dir); !strings.Contains(out, want) {
				t.Errorf("summary:\n%s\nwant the row %s", out, want)
			}
		})
	}
}
