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
	for _, tc := range []struct {
		env     string
		want    int
		wantErr bool
	}{{"", 256, false}, {"0", 0, false}, {"64", 64, false}, {"-1", 0, true}, {"70000", 0, true}} {
		var env []string
		if tc.env != "" {
			env = []string{"SLUICE_GRPC_STREAM_WORKERS=" + tc.env}
		}
		s, err := parseServe(nil, env, io.Discard)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%q: err = %v, want error %v", tc.env, err, tc.wantErr)
		}
		if err == nil && s.StreamWorkers != tc.want {
			t.Fatalf("%q: StreamWorkers = %d, want %d", tc.env, s.StreamWorkers, tc.want)
		}
	}
}
