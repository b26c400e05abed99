package main

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// The strict mode's settings write the backend's WaitReplicas and
// WaitTimeout; a WAIT that would outlast REDIS_TIMEOUT is refused.
func TestParseServeWait(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      []string
		replicas int
		timeout  time.Duration
		wantErr  string
	}{
		{name: "defaults: off", timeout: redis.DefaultWaitTimeout},
		{name: "environment", env: []string{"SLUICE_REDIS_WAIT_REPLICAS=1", "SLUICE_REDIS_WAIT_TIMEOUT=100ms"}, replicas: 1, timeout: 100 * time.Millisecond},
		{name: "flags win", args: []string{"--redis-wait-replicas=2", "--redis-wait-timeout=20ms"},
			env: []string{"SLUICE_REDIS_WAIT_REPLICAS=1"}, replicas: 2, timeout: 20 * time.Millisecond},
		{name: "negative", env: []string{"SLUICE_REDIS_WAIT_REPLICAS=-1"}, wantErr: "redis wait replicas -1 is negative"},
		{name: "beyond the default redis timeout", env: []string{"SLUICE_REDIS_WAIT_REPLICAS=1", "SLUICE_REDIS_WAIT_TIMEOUT=1s"},
			wantErr: "must be below the redis timeout 1s"},
		{name: "beyond REDIS_TIMEOUT", env: []string{"SLUICE_REDIS_WAIT_REPLICAS=1", "SLUICE_REDIS_WAIT_TIMEOUT=300ms", "REDIS_TIMEOUT=200ms"},
			wantErr: "must be below the redis timeout 200ms"},
		{name: "long, but off", env: []string{"SLUICE_REDIS_WAIT_TIMEOUT=5s"}, timeout: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := parseServeCase(t, tt.args, append([]string{"REDIS_URL=r:1"}, tt.env...), tt.wantErr)
			if s == nil {
				return
			}
			if s.Redis.WaitReplicas != tt.replicas || s.Redis.WaitTimeout != tt.timeout {
				t.Errorf("backend options %d, %v; want %d, %v", s.Redis.WaitReplicas, s.Redis.WaitTimeout, tt.replicas, tt.timeout)
			}
		})
	}
}
