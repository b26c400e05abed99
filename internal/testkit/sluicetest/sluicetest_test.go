package sluicetest

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestMain(m *testing.M) { Main(m) }

func TestD(t *testing.T) {
	tests := []struct {
		in   []string
		want []Entry
	}{
		{nil, []Entry{}},
		{[]string{"k", "v"}, []Entry{{"k", "v"}}},
		{[]string{"a", "1", "b", "2"}, []Entry{{"a", "1"}, {"b", "2"}}},
		{[]string{"a", "1", "b"}, []Entry{{"a", "1"}, {"b", ""}}},
	}
	for _, tt := range tests {
		if got := D(tt.in...); !slices.Equal(got, tt.want) {
			t.Errorf("D(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestProcess runs the real binary with the memory backend: it serves,
// decides, answers /healthcheck, and exits 0 on SIGTERM.
func TestProcess(t *testing.T) {
	dir := t.TempDir()
	cfg := "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			p := Start(t, Options{ConfigDir: dir, Env: map[string]string{"BACKEND_TYPE": "memory", "LOG_FORMAT": format}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				resp, err := p.ShouldRateLimit(ctx, "api", 0, D("k", "v"))
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if resp.OverallCode != want {
					t.Errorf("call %d: %v, want %v", i+1, resp.OverallCode, want)
				}
			}
			resp, err := http.Get("http://" + p.HTTPAddr() + "/healthcheck")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "OK" {
				t.Errorf("/healthcheck: %d %q, want 200 OK", resp.StatusCode, body)
			}
			pid := p.PID()
			p.Stop()
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("pid %d alive after Stop", pid)
			}
		})
	}
}

// TestKillAndExitCode: after Kill, Wait reports the process did not exit
// by itself.
func TestKillAndExitCode(t *testing.T) {
	p := Start(t, Options{Env: map[string]string{"BACKEND_TYPE": "memory", "SLUICE_CONFIG": t.TempDir()}})
	if !p.Running() {
		t.Fatal("Running is false before Kill")
	}
	p.Kill()
	if p.Running() {
		t.Error("Running is true after Kill")
	}
	if code, err := p.Wait(time.Second); err == nil {
		t.Errorf("Wait after Kill: exit %d, nil error; want an error (killed by a signal)", code)
	}
}
