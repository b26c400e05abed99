package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMeasureTargets: measure.sh expands scenario groups into targets in
// order, each once, and skips the incumbent's without INCUMBENT_BIN. LIST
// stops it before it builds or starts anything.
func TestMeasureTargets(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	all := "noop noopredis memory redis1 inc1 redis3 redis3fw redis3d inc3 attack incattack " +
		"noop-c1 noopredis-c1 redis1-c1 inc1-c1 noop-c16 noopredis-c16 redis1-c16 inc1-c16 noop-c256 noopredis-c256 redis1-c256 inc1-c256 " +
		"redis1cl inc1cl redis3dcl inc3cl redis6fw redis5d inc5 redis10d inc10 redis1nc redis1nm redis1ev memorynw attacknc redis1dw redis1gf redis1dw-c1"
	for _, tt := range []struct {
		name, targets, incumbent, want string
		env                            []string // more settings
	}{
		{"default: every group", "", "/bin/ratelimit", all, nil},
		{"all", "all", "/bin/ratelimit", all, nil},
		{"without the incumbent", "", "", "noop noopredis memory redis1 redis3 redis3fw redis3d attack noop-c1 noopredis-c1 redis1-c1 noop-c16 noopredis-c16 redis1-c16 noop-c256 noopredis-c256 redis1-c256 redis1cl redis3dcl redis6fw redis5d redis10d redis1nc redis1nm redis1ev memorynw attacknc redis1dw redis1gf redis1dw-c1", nil},
		{"groups share targets", "rules descriptors", "/bin/ratelimit", "redis1 redis3fw redis6fw inc1 redis3d inc3 redis5d inc5 redis10d inc10", nil},
		{"concurrency keeps the default c in its place", "concurrency", "x", "noop-c1 noopredis-c1 redis1-c1 inc1-c1 noop-c16 noopredis-c16 redis1-c16 inc1-c16 noop noopredis redis1 inc1 noop-c256 noopredis-c256 redis1-c256 inc1-c256", nil},
		{"cluster", "cluster", "x", "redis1 inc1 redis1cl inc1cl redis3d inc3 redis3dcl inc3cl", nil},
		{"each Redis load beside the incumbent's", "rediscpu", "x", "redis1 inc1 redis3 redis3fw inc3 redis5d inc5 redis10d inc10 attack incattack redis1cl inc1cl redis3dcl inc3cl", nil},
		{"defaults", "defaults", "", "redis1 redis1nc redis1nm redis1ev memory memorynw attack attacknc redis1dw redis1gf redis1-c1 redis1dw-c1", nil},
		{"plain targets and a repeat", "redis1 noop-c8 redis1", "", "redis1 noop-c8", nil},
		{"an unknown target stops it", "redis1 redis2", "", "exit status 2", nil},
		{"a bad concurrency suffix stops it", "redis1-cx", "", "exit status 2", nil},
		{"a run longer than two minutes, a warm-up under a second", "redis1", "", "redis1", []string{"DURATION=310s", "WARMUP=500ms"}},
		{"a duration it cannot bound stops it", "redis1", "", "exit status 2", []string{"DURATION=1m30s"}},
		{"so does a bad warm-up", "redis1", "", "exit status 2", []string{"WARMUP=2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.Command(bash, "measure.sh", filepath.Join(out, "o"))
			cmd.Env = append(os.Environ(), "LIST=1", "TARGETS="+tt.targets, "INCUMBENT_BIN="+tt.incumbent)
			cmd.Env = append(cmd.Env, tt.env...)
			got, err := cmd.Output()
			if err != nil {
				got = []byte(err.Error())
			}
			if g := strings.Join(strings.Fields(string(got)), " "); g != tt.want {
				t.Errorf("targets\n%s\nwant\n%s", g, tt.want)
			}
			if _, err := os.Stat(filepath.Join(out, "o")); !os.IsNotExist(err) {
				t.Errorf("LIST created the output directory (%v)", err)
			}
		})
	}
}
