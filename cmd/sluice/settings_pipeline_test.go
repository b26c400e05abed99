package main

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// The Redis pipeline settings: coalescing on by default, the reference's
// REDIS_PIPELINE_WINDOW and REDIS_PIPELINE_LIMIT honoured (no longer
// listed as ignored).
func TestParseServePipeline(t *testing.T) {
	tests := []struct {
		name         string
		args, env    []string
		coalesce     bool
		noMerge      bool
		window       time.Duration
		limit        int
		wantErr      string
		ignoredEmpty bool
	}{
		{name: "defaults", coalesce: true, limit: redis.DefaultPipelineLimit},
		{
			name:     "reference variables",
			env:      []string{"REDIS_PIPELINE_WINDOW=150us", "REDIS_PIPELINE_LIMIT=32"},
			coalesce: true, window: 150 * time.Microsecond, limit: 32, ignoredEmpty: true,
		},
		{name: "coalescing off by environment", env: []string{"SLUICE_REDIS_COALESCE=false"}, limit: redis.DefaultPipelineLimit},
		{name: "coalescing off by flag", args: []string{"--redis-coalesce=false"}, env: []string{"SLUICE_REDIS_COALESCE=true"}, limit: redis.DefaultPipelineLimit},
		{name: "merging off by environment", env: []string{"SLUICE_REDIS_MERGE=false"}, coalesce: true, noMerge: true, limit: redis.DefaultPipelineLimit},
		{name: "merging off by flag", args: []string{"--redis-merge=false"}, env: []string{"SLUICE_REDIS_MERGE=true"}, coalesce: true, noMerge: true, limit: redis.DefaultPipelineLimit},
		{name: "negative window", env: []string{"REDIS_PIPELINE_WINDOW=-1ms"}, wantErr: "REDIS_PIPELINE_WINDOW: redis pipeline window -1ms is negative"},
		{name: "negative limit", args: []string{"--redis-pipeline-limit=-2"}, wantErr: "--redis-pipeline-limit: redis pipeline limit -2 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := parseServeCase(t, tt.args, append([]string{"REDIS_URL=r:1"}, tt.env...), tt.wantErr)
			if s == nil {
				return
			}
			if !s.Redis.DisableCoalescing != tt.coalesce || s.Redis.PipelineWindow != tt.window || s.Redis.PipelineLimit != tt.limit {
				t.Errorf("coalesce %v window %v limit %d, want %v %v %d",
					!s.Redis.DisableCoalescing, s.Redis.PipelineWindow, s.Redis.PipelineLimit, tt.coalesce, tt.window, tt.limit)
			}
			if s.Redis.DisableMerging != tt.noMerge {
				t.Errorf("merging off %v, want %v", s.Redis.DisableMerging, tt.noMerge)
			}
			if tt.ignoredEmpty && len(s.ignored) > 0 {
				t.Errorf("ignored %v: the pipeline variables are implemented", s.ignored)
			}
		})
	}
}
