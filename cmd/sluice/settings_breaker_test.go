package main

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// The Redis breaker settings write the backend's BreakerOptions: defaults
// are the backend's, flags win, nonsense is refused naming the setting.
func TestParseServeBreaker(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     []string
		options redis.BreakerOptions // what reaches the backend
		wantErr string
	}{
		{name: "defaults", options: redis.BreakerOptions{Failures: redis.DefaultBreakerFailures, OpenFor: redis.DefaultBreakerOpenFor}},
		{
			name:    "environment",
			env:     []string{"SLUICE_REDIS_BREAKER_FAILURES=3", "SLUICE_REDIS_BREAKER_OPEN=500ms"},
			options: redis.BreakerOptions{Failures: 3, OpenFor: 500 * time.Millisecond},
		},
		{
			name:    "flags win",
			args:    []string{"--redis-breaker-failures=10", "--redis-breaker-open=2s"},
			env:     []string{"SLUICE_REDIS_BREAKER_FAILURES=3", "SLUICE_REDIS_BREAKER_OPEN=500ms"},
			options: redis.BreakerOptions{Failures: 10, OpenFor: 2 * time.Second},
		},
		// One meaning per zero: the setting writes the option, whose 0 is
		// the default; a negative count disables.
		{name: "0 is the default", env: []string{"SLUICE_REDIS_BREAKER_FAILURES=0", "SLUICE_REDIS_BREAKER_OPEN=0s"}},
		{name: "negative disables", env: []string{"SLUICE_REDIS_BREAKER_FAILURES=-1"},
			options: redis.BreakerOptions{Failures: -1, OpenFor: redis.DefaultBreakerOpenFor}},
		{name: "failures not a number", args: []string{"--redis-breaker-failures=many"}, wantErr: "redis-breaker-failures"},
		{name: "negative open period", args: []string{"--redis-breaker-open=-1s"}, wantErr: "--redis-breaker-open: breaker open period -1s is negative"},
		{name: "open period without unit", env: []string{"SLUICE_REDIS_BREAKER_OPEN=250"}, wantErr: "SLUICE_REDIS_BREAKER_OPEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := parseServeCase(t, tt.args, append([]string{"REDIS_URL=r:1"}, tt.env...), tt.wantErr)
			if s == nil {
				return
			}
			if s.Redis.Breaker != tt.options {
				t.Errorf("backend options %+v, want %+v", s.Redis.Breaker, tt.options)
			}
			if len(s.ignored) > 0 {
				t.Errorf("ignored %v", s.ignored)
			}
		})
	}
}
