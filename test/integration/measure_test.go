package integration

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// measureCase is one configuration whose Redis memory is measured.
type measureCase struct {
	name  string // shown in the table
	rules string // the YAML rate_limits list of the descriptor
	hits  uint64 // cost per descriptor, in one request
	keys  int    // descriptors to create; 0 means the default
	pad   int    // pad each descriptor value to this many bytes
}

// measureCases are the algorithms at limits 10 and 100, each with one hit
// per descriptor and filled to its limit (the sliding log's size grows
// with the hits it holds), plus the three-rule descriptor of the examples.
func measureCases() []measureCase {
	var out []measureCase
	for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket", "sliding_log"} {
		for _, l := range []uint64{10, 100} {
			rules := fmt.Sprintf("[{algorithm: %s, unit: hour, requests_per_unit: %d}]", alg, l)
			out = append(out,
				measureCase{name: fmt.Sprintf("%s L=%d, 1 hit", alg, l), rules: rules, hits: 1},
				measureCase{name: fmt.Sprintf("%s L=%d, full (%d hits)", alg, l, l), rules: rules, hits: l})
		}
	}
	// Above 128 members a sorted set leaves Redis's compact listpack
	// encoding (zset-max-listpack-entries) for a skiplist.
	out = append(out, measureCase{
		name:  "sliding_log L=1000, full (1000 hits)",
		rules: "[{algorithm: sliding_log, unit: hour, requests_per_unit: 1000}]", hits: 1000, keys: 1000,
	})
	// Key length: a 64-byte value (a long user id, an IPv6 address with a
	// path) instead of the 9 bytes of u-0000042.
	out = append(out, measureCase{
		name:  "fixed_window L=10, 1 hit, 64-byte value",
		rules: "[{algorithm: fixed_window, unit: hour, requests_per_unit: 10}]", hits: 1, pad: 64,
	})
	// The bucket refills 10 an hour, so a 1-hit key lives 6 minutes: long
	// enough not to expire while the others are written.
	out = append(out, measureCase{
		name: "3 rules (token_bucket + sliding_window + calendar fixed_window), 1 hit",
		rules: "[{name: burst, algorithm: token_bucket, unit: hour, requests_per_unit: 10, burst: 30}, " +
			"{name: hourly, algorithm: sliding_window, unit: hour, requests_per_unit: 1000}, " +
			"{name: daily, algorithm: fixed_window, unit: day, requests_per_unit: 10000, time_zone: Asia/Shanghai}]",
		hits: 1,
	})
	// The incumbent's shape: several fixed windows on one descriptor.
	out = append(out, measureCase{
		name: "3 fixed windows (minute, hour, day), 1 hit",
		rules: "[{name: m, unit: minute, requests_per_unit: 100}, {name: h, unit: hour, requests_per_unit: 1000}, " +
			"{name: d, unit: day, requests_per_unit: 10000}]",
		hits: 1,
	})
	// Two rules of which one is a sliding log: a counter key and a sorted set.
	out = append(out, measureCase{
		name:  "fixed_window + sliding_log L=10, 1 hit",
		rules: "[{unit: hour, requests_per_unit: 100}, {algorithm: sliding_log, unit: hour, requests_per_unit: 10}]",
		hits:  1,
	})
	return out
}

// TestMeasureMemory measures Redis memory per active descriptor for each
// algorithm, through the real binary: for each case a fresh redis-server
// and sluice, then 100k distinct descriptors (user=u-0000000...) decided
// 64 to a request, and INFO memory's used_memory before and after. It runs
// only with SLUICE_MEASURE=1 (it takes a few minutes and ~1 GB of memory):
//
//	SLUICE_MEASURE=1 go test -run TestMeasureMemory -v -timeout 30m ./test/integration/
//
// -run 'TestMeasureMemory/sliding_log' measures only the cases whose names
// match.
// SLUICE_MEASURE_KEYS changes the descriptor count; SLUICE_MEASURE_OUT
// names a file to write the Markdown table to.
func TestMeasureMemory(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("set SLUICE_MEASURE=1 to measure Redis memory per descriptor (a few minutes)")
	}
	n := 100_000
	if v := os.Getenv("SLUICE_MEASURE_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SLUICE_MEASURE_KEYS=%q: want a positive integer", v)
		}
	}
	version := redisVersion(t)
	var table strings.Builder
	fmt.Fprintf(&table, "| case | descriptors | Redis keys / descriptor | used_memory delta | bytes / descriptor | MEMORY USAGE of one key | PTTL of one key |\n")
	fmt.Fprintf(&table, "|---|---:|---:|---:|---:|---:|---:|\n")
	for _, mc := range measureCases() {
		keys := n
		if mc.keys > 0 && mc.keys < n {
			keys = mc.keys
		}
		row := measureOne(t, mc, keys)
		if row == "" {
			continue // not selected by -run
		}
		table.WriteString(row + "\n")
		t.Log(row)
	}
	out := fmt.Sprintf("Redis %s, counter keys like `{m|user=u-0000042}` (18 bytes), sliding logs `{m|user=u-0000042}:sl.1ho` (25), no CACHE_KEY_PREFIX.\n\n%s", version, table.String())
	t.Logf("\n%s", out)
	if path := os.Getenv("SLUICE_MEASURE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// measureOne fills a fresh Redis with keys descriptors of mc and returns
// its table row.
func measureOne(t *testing.T, mc measureCase, keys int) string {
	var row string
	t.Run(strings.NewReplacer(" ", "_", "=", "", ",", "", "(", "", ")", "").Replace(mc.name), func(t *testing.T) {
		rs := redistest.Standalone(t)
		cfg := "domain: m\ndescriptors:\n  - key: user\n    rate_limits: " + mc.rules + "\n"
		p := sluicetest.Start(t, sluicetest.Options{
			ConfigDir: configDir(t, map[string]string{"m.yaml": cfg}),
			Env:       merge(standaloneEnv(rs), map[string]string{"REDIS_TIMEOUT": "5s"}),
		})
		rc := rs.Client()
		ctx := ctxFor(t, 10*time.Minute)
		before := usedMemory(t, ctx, rs)

		const perRequest, workers = 64, 4
		var next atomic.Int64
		var wg sync.WaitGroup
		var failure atomic.Value
		for range workers {
			wg.Go(func() {
				for {
					start := int(next.Add(perRequest)) - perRequest
					if start >= keys || failure.Load() != nil {
						return
					}
					var descs [][]sluicetest.Entry
					for i := start; i < min(start+perRequest, keys); i++ {
						descs = append(descs, entries("user", value(i, mc.pad)))
					}
					req := withCost(sluicetest.Request("m", 0, descs...), mc.hits, false)
					resp, err := p.Client().ShouldRateLimit(ctx, req)
					if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
						err = fmt.Errorf("request at %d: %v, want OK", start, resp.OverallCode)
					}
					if err != nil {
						failure.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failure.Load(); err != nil {
			t.Fatal(err)
		}
		after := usedMemory(t, ctx, rs)
		dbsize, err := rc.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		sample, err := rc.Keys(ctx, "{m|user="+value(42, mc.pad)+"}*").Result() // the counter key, and a sliding log's
		if err != nil || len(sample) == 0 {
			t.Fatalf("no key for descriptor 42: %v %v", sample, err)
		}
		var usage []string
		var ttls []string
		for _, k := range sample {
			u, err := rc.MemoryUsage(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			ttl, err := rc.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			usage = append(usage, strconv.FormatInt(u, 10))
			ttls = append(ttls, ttl.Round(time.Second).String())
		}
		delta := after - before
		row = fmt.Sprintf("| %s | %d | %.2f | %.1f MB | %d | %s B | %s |", mc.name, keys, float64(dbsize)/float64(keys),
			float64(delta)/1e6, delta/int64(keys), strings.Join(usage, " + "), strings.Join(ttls, ", "))
		p.Stop()
	})
	return row
}

// value is the descriptor value of the i-th descriptor: u-0000042, padded
// with x to pad bytes.
func value(i, pad int) string {
	v := fmt.Sprintf("u-%07d", i)
	if len(v) < pad {
		v += strings.Repeat("x", pad-len(v))
	}
	return v
}

var usedMemoryRE = regexp.MustCompile(`(?m)^used_memory:(\d+)`)

// usedMemory reads used_memory from INFO memory.
func usedMemory(t *testing.T, ctx context.Context, rs *redistest.Server) int64 {
	t.Helper()
	info, err := rs.Client().Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := usedMemoryRE.FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no used_memory in INFO memory:\n%s", info)
	}
	v, _ := strconv.ParseInt(m[1], 10, 64)
	return v
}

// redisVersion returns the version of the installed redis-server.
func redisVersion(t *testing.T) string {
	rs := redistest.Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rs.Client().Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^redis_version:(\S+)`).FindStringSubmatch(info); m != nil {
		return m[1]
	}
	return "unknown"
}
