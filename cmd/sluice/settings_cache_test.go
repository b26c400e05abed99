package main

import (
	"io"
	"testing"
)

func TestLocalCacheSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     []string
		on      bool
		size    int
		wantErr string
	}{
		{name: "defaults", on: true, size: 10000},
		{name: "env off", env: []string{"SLUICE_LOCAL_CACHE=false"}, on: false, size: 10000},
		{name: "flag wins", args: []string{"--local-cache=true", "--local-cache-size=5"}, env: []string{"SLUICE_LOCAL_CACHE=false"}, on: true, size: 5},
		{name: "size zero", env: []string{"SLUICE_LOCAL_CACHE_SIZE=0"}, wantErr: "SLUICE_LOCAL_CACHE_SIZE"},
		{name: "size not a number", env: []string{"SLUICE_LOCAL_CACHE_SIZE=many"}, wantErr: "SLUICE_LOCAL_CACHE_SIZE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseServeCase(t, tc.args, tc.env, tc.wantErr)
			if s == nil {
				return
			}
			if s.LocalCache != tc.on || s.LocalCacheSize != tc.size {
				t.Fatalf("LocalCache=%v size=%d, want %v %d", s.LocalCache, s.LocalCacheSize, tc.on, tc.size)
			}
		})
	}
}

func TestStreamWorkersSetting(t *testing.T) {
	checkIntSetting(t, "SLUICE_GRPC_STREAM_WORKERS", func(s *settings) int { return s.StreamWorkers },
		[]intSettingCase{{"", 256, false}, {"0", 0, false}, {"64", 64, false}, {"-1", 0, true}, {"70000", 0, true}})
}

// intSettingCase is one value of an integer setting's environment
// variable ("" for unset), the value parsed, or that it is refused.
type intSettingCase struct {
	env     string
	want    int
	wantErr bool
}

// checkIntSetting parses `sluice serve`'s settings with each case's value
// of the variable name and checks what field reads, or the refusal.
func checkIntSetting(t *testing.T, name string, field func(*settings) int, cases []intSettingCase) {
	t.Helper()
	for _, tc := range cases {
		var env []string
		if tc.env != "" {
			env = []string{name + "=" + tc.env}
		}
		s, err := parseServe(nil, env, io.Discard)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s=%q: err = %v, want error %v", name, tc.env, err, tc.wantErr)
		}
		if err == nil && field(s) != tc.want {
			t.Fatalf("%s=%q: %d, want %d", name, tc.env, field(s), tc.want)
		}
	}
}
