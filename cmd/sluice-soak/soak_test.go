package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

func TestParseRSS(t *testing.T) {
	tests := []struct {
		status string
		want   int64
		ok     bool
	}{
		{"Name:\tsluice\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 100 kB\n", 12345 << 10, true},
		{"Name:\tsluice\n", 0, false},
		{"VmRSS:\t12 MB\n", 0, false},
	}
	for _, tt := range tests {
		got, err := parseRSS(tt.status)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseRSS(%q) = %d, %v; want %d, ok %v", tt.status, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseGoroutines(t *testing.T) {
	tests := []struct {
		text string
		want int
		ok   bool
	}{
		{"goroutine profile: total 42\n7 @ 0x1 0x2\n", 42, true},
		{"# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 17\n", 17, true},
		{"go_goroutines_total 3\n", 0, false},
		{"404 page not found\n", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseGoroutines(tt.text)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseGoroutines(%q) = %d, %v; want %d, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
}

// rows builds samples with the given RSS (MiB) and goroutines.
func rows(rss []float64, goroutines []int) []row {
	out := make([]row, len(rss))
	for i := range rss {
		out[i] = row{rss: int64(rss[i] * (1 << 20)), goroutines: goroutines[i], redisMem: -1}
	}
	return out
}

func TestVerdicts(t *testing.T) {
	tests := []struct {
		name                string
		rss                 []float64
		goroutines          []int
		rssLevels, grLevels bool
	}{
		{"flat", []float64{20, 30, 31, 30, 31, 30, 31, 30, 31}, []int{10, 20, 20, 21, 20, 20, 21, 20, 20}, true, true},
		{"warm-up growth is ignored", []float64{5, 10, 40, 40, 41, 40, 41, 42, 41}, []int{5, 9, 30, 30, 30, 30, 30, 30, 30}, true, true},
		{"small absolute growth is noise", []float64{10, 10, 10, 10, 10, 10, 13, 13, 13}, []int{8, 8, 8, 8, 8, 8, 12, 12, 12}, true, true},
		{"steady growth", []float64{20, 30, 40, 50, 60, 70, 80, 90, 100}, []int{10, 20, 30, 40, 50, 60, 70, 80, 90}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdicts(rows(tt.rss, tt.goroutines))
			if v[0].levels != tt.rssLevels || v[1].levels != tt.grLevels {
				t.Fatalf("RSS levels %v (%.1f -> %.1f), goroutines levels %v (%.1f -> %.1f); want %v, %v",
					v[0].levels, v[0].middle, v[0].last, v[1].levels, v[1].middle, v[1].last, tt.rssLevels, tt.grLevels)
			}
			if !v[2].unavailable {
				t.Fatal("Redis used_memory judged without samples")
			}
		})
	}
}

func TestNextRequestIsValid(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		req := nextRequest(r)
		if req.Domain == "" || len(req.Descriptors) == 0 || len(req.Descriptors) > 2 {
			t.Fatalf("request %v", req)
		}
		for _, d := range req.Descriptors {
			if len(d.Entries) == 0 || d.Entries[0].Key == "" {
				t.Fatalf("descriptor %v", d)
			}
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-backends", "memory,etcd"},
		{"-duration", "10s", "-sample", "5s"},
		{"-clients", "0"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("run(%q) = %d, want 2 (stderr %q)", args, code, stderr.String())
		}
	}
}

// TestSoakShort runs the whole command briefly: build, both backends,
// samples, verdict, clean stop.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs it")
	}
	backends := "memory,redis"
	if _, err := exec.LookPath("redis-server"); err != nil {
		if !redistest.OptedOut() {
			t.Fatalf("redis-server: %v: %s", err, redistest.InstallHint)
		}
		backends = "memory"
	}
	var out, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, []string{"-duration", "3s", "-sample", "1s", "-backends", backends, "-clients", "4", "-rate", "400"}, &out, &stderr)
	t.Logf("output:\n%s", out.String())
	if code != 0 && !strings.Contains(out.String(), "STILL GROWING") {
		t.Fatalf("exit %d without a growth verdict; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"== memory backend", "RSS MiB |", "verdict (memory backend", "sluice stopped cleanly", "failed calls: 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(backends, "redis") && !strings.Contains(out.String(), "Redis used") {
		t.Error("no Redis used_memory in the redis backend's verdict")
	}
}
