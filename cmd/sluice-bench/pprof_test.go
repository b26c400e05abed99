package main

import (
	"bytes"
	"compress/gzip"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// testProfile encodes a CPU profile: functions by name (ids from 1), one
// location per entry of locations (ids from 1; each a list of function
// ids, innermost first), and samples of (location ids leaf first, CPU ns).
// Samples alternate packed and unpacked repeated fields, as encoders may.
func testProfile(funcs []string, locations [][]uint64, samples []struct {
	locs []uint64
	ns   int64
}) []byte {
	strs := []string{""}
	str := func(s string) uint64 {
		strs = append(strs, s)
		return uint64(len(strs) - 1)
	}
	msg := func(b []byte, num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), body)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	var b []byte
	for _, t := range [][2]string{{"samples", "count"}, {"cpu", "nanoseconds"}} {
		b = msg(b, 1, varint(varint(nil, 1, str(t[0])), 2, str(t[1])))
	}
	for i, s := range samples {
		var sb []byte
		if i%2 == 0 {
			var packed []byte
			for _, l := range s.locs {
				packed = protowire.AppendVarint(packed, l)
			}
			sb = msg(sb, 1, packed)
			sb = msg(sb, 2, protowire.AppendVarint(protowire.AppendVarint(nil, 1), uint64(s.ns)))
		} else {
			for _, l := range s.locs {
				sb = varint(sb, 1, l)
			}
			sb = varint(varint(sb, 2, 1), 2, uint64(s.ns))
		}
		b = msg(b, 2, sb)
	}
	for i, fns := range locations {
		lb := varint(nil, 1, uint64(i+1))
		for _, f := range fns {
			lb = msg(lb, 4, varint(varint(nil, 1, f), 2, 10))
		}
		b = msg(b, 4, lb)
	}
	for i, name := range funcs {
		b = msg(b, 5, varint(varint(nil, 1, uint64(i+1)), 2, str(name)))
	}
	for _, s := range strs {
		b = msg(b, 6, []byte(s))
	}
	return b
}

func TestStageShares(t *testing.T) {
	funcs := []string{
		"internal/runtime/syscall/linux.Syscall6", // 1
		"syscall.Write", // 2
		"github.com/redis/go-redis/v9/internal/pool.(*Conn).Write",       // 3
		"google.golang.org/grpc/internal/transport.(*http2Server).write", // 4
		"runtime.mallocgc", // 5
		"github.com/sluice-rl/sluice/internal/service.(*Service).plan", // 6
		"runtime.gcBgMarkWorker", // 7
		"runtime.gcDrain",        // 8
		"runtime.findRunnable",   // 9
		"slices.sortFunc[go.shape.struct { K example.com/x/y.Key }]",       // 10
		"github.com/sluice-rl/sluice/pkg/backend/redis.(*coalescer).flush", // 11
	}
	locations := [][]uint64{
		{1},    // 1
		{2, 3}, // 2: syscall.Write inlined into go-redis
		{2},    // 3
		{4},    // 4
		{5},    // 5
		{6},    // 6
		{8, 7}, // 7
		{9},    // 8
		{10},   // 9
		{11},   // 10
	}
	samples := []struct {
		locs []uint64
		ns   int64
	}{
		{[]uint64{1, 2}, 30},    // a write from go-redis
		{[]uint64{1, 3, 4}, 20}, // a write from gRPC
		{[]uint64{5, 6}, 10},    // an allocation of the service
		{[]uint64{7}, 25},       // background GC
		{[]uint64{8}, 5},        // the scheduler
		{[]uint64{9, 10}, 10},   // a generic std function called by the backend
	}
	want := map[string]float64{
		"Redis client: go-redis": 0.30,
		"gRPC and HTTP/2":        0.20,
		"sluice: service (validation, matching, decisions, response)": 0.10,
		"Go runtime: garbage collection":                              0.25,
		"Go runtime: scheduler, network poller, other":                0.05,
		"Redis client: sluice's backend (routing, coalescing)":        0.10,
	}
	raw := testProfile(funcs, locations, samples)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	for name, data := range map[string][]byte{"plain": raw, "gzipped": gz.Bytes()} {
		t.Run(name, func(t *testing.T) {
			got, err := stageShares(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("stages %v, want %v", got, want)
			}
			for stage, w := range want {
				if math.Abs(got[stage]-w) > 1e-9 {
					t.Errorf("%s: %v, want %v", stage, got[stage], w)
				}
			}
		})
	}

	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"not a profile", []byte{0xff, 0xff, 0xff}},
		{"bad gzip", []byte{0x1f, 0x8b, 0x00}},
		{"no samples", testProfile(funcs, locations, nil)},
	} {
		if _, err := stageShares(tt.data); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestFuncPackage(t *testing.T) {
	for fn, want := range map[string]string{
		"github.com/sluice-rl/sluice/internal/service.(*Service).plan": "github.com/sluice-rl/sluice/internal/service",
		"runtime.mallocgc":                                             "runtime",
		"internal/runtime/syscall/linux.Syscall6":                      "internal/runtime/syscall/linux",
		"slices.insertionSortCmpFunc[go.shape.struct { K a.b/c.Key }]": "slices",
		"github.com/redis/go-redis/v9.(*baseClient).process.func1":     "github.com/redis/go-redis/v9",
		"main": "main",
	} {
		if got := funcPackage(fn); got != want {
			t.Errorf("funcPackage(%q) = %q, want %q", fn, got, want)
		}
	}
}
