package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// The Redis breaker settings: defaults are the backend's, 0 failures
// disables the breakers, flags win, nonsense is refused naming the setting.
func TestParseServeBreaker(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      []string
		failures int
		open     time.Duration
		options  redis.BreakerOptions // what reaches the backend
		wantErr  string
	}{
		{
			name:     "defaults",
			failures: redis.DefaultBreakerFailures, open: redis.DefaultBreakerOpenFor,
			options: redis.BreakerOptions{Failures: redis.DefaultBreakerFailures, OpenFor: redis.DefaultBreakerOpenFor},
		},
		{
			name:     "environment",
			env:      []string{"SLUICE_REDIS_BREAKER_FAILURES=3", "SLUICE_REDIS_BREAKER_OPEN=500ms"},
			failures: 3, open: 500 * time.Millisecond,
			options: redis.BreakerOptions{Failures: 3, OpenFor: 500 * time.Millisecond},
		},
		{
			name:     "flags win",
			args:     []string{"--redis-breaker-failures=10", "--redis-breaker-open=2s"},
			env:      []string{"SLUICE_REDIS_BREAKER_FAILURES=3", "SLUICE_REDIS_BREAKER_OPEN=500ms"},
			failures: 10, open: 2 * time.Second,
			options: redis.BreakerOptions{Failures: 10, OpenFor: 2 * time.Second},
		},
		{
			name:     "0 disables",
			env:      []string{"SLUICE_REDIS_BREAKER_FAILURES=0"},
			failures: 0, open: redis.DefaultBreakerOpenFor,
			options: redis.BreakerOptions{Failures: -1, OpenFor: redis.DefaultBreakerOpenFor},
		},
		{name: "negative failures", env: []string{"SLUICE_REDIS_BREAKER_FAILURES=-1"}, wantErr: "SLUICE_REDIS_BREAKER_FAILURES: -1: must not be negative"},
		{name: "failures not a number", args: []string{"--redis-breaker-failures=many"}, wantErr: "redis-breaker-failures"},
		{name: "zero open period", env: []string{"SLUICE_REDIS_BREAKER_OPEN=0s"}, wantErr: "SLUICE_REDIS_BREAKER_OPEN: duration 0s must be positive"},
		{name: "negative open period", args: []string{"--redis-breaker-open=-1s"}, wantErr: "--redis-breaker-open: duration -1s must be positive"},
		{name: "open period without unit", env: []string{"SLUICE_REDIS_BREAKER_OPEN=250"}, wantErr: "SLUICE_REDIS_BREAKER_OPEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.args, tt.env, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Redis.BreakerFailures != tt.failures || s.Redis.BreakerOpen != tt.open {
				t.Errorf("failures %d open %v, want %d %v", s.Redis.BreakerFailures, s.Redis.BreakerOpen, tt.failures, tt.open)
			}
			if got := s.Redis.breaker(); got != tt.options {
				t.Errorf("backend options %+v, want %+v", got, tt.options)
			}
			if len(s.ignored) > 0 {
				t.Errorf("ignored %v", s.ignored)
			}
		})
	}
}
