package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/loadgen"
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

func TestNoopCommand(t *testing.T) {
	r, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"noop", "--addr", "127.0.0.1:0", "--for", "20s"}, io.Discard, w)
		w.Close()
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, r)
	addr := strings.TrimSpace(line[strings.LastIndex(line, " "):])
	var stdout bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if code := run(ctx, []string{"--addr", addr, "--requests", "50", "--warmup", "0", "--quiet"}, &stdout, io.Discard); code != 0 {
		t.Fatalf("run against noop: exit %d", code)
	}
	if !strings.Contains(stdout.String(), `"ok":50`) {
		t.Errorf("report %s", stdout.String())
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
		{[]string{"run", "extra"}, 1},
		{[]string{"-h"}, 0},
	} {
		if code := run(context.Background(), tt.args, io.Discard, io.Discard); code != tt.code {
			t.Errorf("%q: exit %d, want %d", tt.args, code, tt.code)
		}
	}
}

func TestSummarize(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, tput := range []string{"1000", "3000", "2000"} {
		round := strconv.Itoa(i + 1)
		write("noop."+round+".json", `{"throughput_rps":`+tput+`,"latency_ms":{"p99":1}}`)
		write("memory."+round+".json", `{"throughput_rps":`+tput+`0,"calls_total":1000000,"latency_ms":{"p99":2}}`)
		write("memory."+round+".cpu.json", `{"wall_s":2,"server_cpu_s":1,"redis_cpu_s":0,"client_cpu_s":0.5,"others_cpu_s":0.2}`)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"summarize", dir}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[2], "| noop | 2000 | — | 1.00 | 0.0 | 0.0 | 0.000 | — |") ||
		!strings.HasPrefix(lines[3], "| memory | 20000 | 1000% | 2.00 | 1.0 | 0.0 | 0.000 | — | 10000 (2.00) [0.50 / 0.00 / 0.25 / 0.10];") {
		t.Errorf("summary:\n%s", out.String())
	}
	if code := run(context.Background(), []string{"summarize", t.TempDir()}, io.Discard, io.Discard); code != 1 {
		t.Errorf("empty directory: exit %d, want 1", code)
	}

	// The same runs measured as separate rounds, one directory each (as
	// variants.sh and ab.sh write them), merge into the same table.
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
			if err := os.WriteFile(filepath.Join(d, strings.Replace(name, "."+strconv.Itoa(round)+".", ".1.", 1)), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var merged bytes.Buffer
	if code := run(context.Background(), append([]string{"summarize"}, dirs...), &merged, io.Discard); code != 0 {
		t.Fatalf("summarize over %d directories: exit %d", len(dirs), code)
	}
	if merged.String() != out.String() {
		t.Errorf("merged rounds:\n%s\nwant the one-directory summary:\n%s", merged.String(), out.String())
	}
}

func TestLocalShare(t *testing.T) {
	var s sample
	s.report.Requests, s.report.CallsTotal = 1000, 2000 // half the calls were warm-up
	s.report.Normal.Requests = 700
	s.report.Attack = loadgen.Split{Requests: 300, OverLimit: 280}
	s.cpu.RedisCalls = 2 * (700 + 20 + 28) // 28 of 280 denials reached Redis
	if got := localShare(s); got < 0.8999 || got > 0.9001 {
		t.Errorf("local share %v, want 0.9", got)
	}
}

// TestSummarizeRedisTable: the Redis table divides Redis's command time
// and commands by the descriptors decided (calls × descriptors per call).
func TestSummarizeRedisTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("inc3.1.json", `{"throughput_rps":100,"calls_total":1000,"descriptors":["a={ip}","b={ip}","c={ip}"],"latency_ms":{"p50":1,"p99":2,"p999":3}}`)
	write("inc3.1.cpu.json", `{"wall_s":1,"server_cpu_s":0.3,"redis_usec":6000,"redis_commands":6000,"redis_used_memory":2000000,"redis_keys":3000}`)
	var out bytes.Buffer
	if code := run(context.Background(), []string{"summarize", dir}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	want := "| inc3 | 3 | 2.00 | 2.00 | 100.0 | 1.00 / 2.00 / 3.00 | 3000 | 2.0 |"
	if !strings.Contains(out.String(), want) {
		t.Errorf("summary:\n%s\nwant the row %s", out.String(), want)
	}
}
