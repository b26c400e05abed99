package integration

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
	"github.com/sluice-rl/sluice/pkg/backend"
)

// boundLogEntries is the size of the full sliding log of
// TestMeasureRequestBound.
const boundLogEntries = 20_000

// TestMeasureRequestBound measures the Redis time of the worst request the
// per-request bound (SLUICE_MAX_REQUEST_RULES) lets through: one request
// naming the same full sliding log (20,000 entries) as many times as the
// bound allows (8192 / 64 = 128), each copy denied (one binary search of
// the log) or refunded (two). It reports, over rounds, the longest Redis
// command of the request (SLOWLOG: the longest a request holds Redis), the
// sum of its commands, and redis-server's main-thread CPU (INFO cpu), for
// sluice's default and for all-or-nothing requests
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, one call per request). The
// denial cache is off: a refund, a peek or another instance skips it. It is
// a measurement, skipped unless asked for:
//
//	SLUICE_MEASURE=1 go test -run TestMeasureRequestBound -v ./test/integration/
//
// SLUICE_MEASURE_COPIES=5000 names the log 5000 times instead (with no
// bound: SLUICE_MAX_REQUEST_RULES=0), to compare.
func TestMeasureRequestBound(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("set SLUICE_MEASURE=1 to measure the Redis time of the largest request the bound allows (a minute)")
	}
	copies := service.DefaultMaxRequestRules / backend.SlidingLogWeight
	env := map[string]string{"SLUICE_LOCAL_CACHE": "false", "REDIS_TIMEOUT": "10s"}
	if v := os.Getenv("SLUICE_MEASURE_COPIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_MEASURE_COPIES=%q: want a positive integer", v)
		}
		copies = n
		if n > service.DefaultMaxRequestRules/backend.SlidingLogWeight {
			env["SLUICE_MAX_REQUEST_RULES"] = "0"
		}
	}
	algorithm := "sliding_log"
	if a := os.Getenv("SLUICE_MEASURE_ALGORITHM"); a != "" {
		algorithm = a
	}
	limit := boundLogEntries
	if algorithm != "sliding_log" {
		limit = 100 // a count: its size does not change its cost
	}
	const rounds = 7
	batch := service.DefaultMaxRequestRules / backend.SlidingLogWeight // entries added per filling request
	var table strings.Builder
	what := fmt.Sprintf("a full %d-entry sliding log", boundLogEntries)
	if algorithm != "sliding_log" {
		what = fmt.Sprintf("a full %s of %d", algorithm, limit)
	}
	fmt.Fprintf(&table, "%s; one request naming %s %d times; %d rounds, median [max]\n\n",
		redisVersion(t), what, copies, rounds)
	fmt.Fprintf(&table, "| mode | copies | Redis calls | longest command (SLOWLOG) | sum of its commands | redis-server main-thread CPU |\n|---|---|---:|---:|---:|---:|\n")
	for _, mode := range []struct {
		name string
		env  map[string]string
	}{
		{"default", nil},
		{"all-or-nothing", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}},
	} {
		rs := redistest.Standalone(t)
		p := sluicetest.Start(t, sluicetest.Options{
			ConfigDir: configDir(t, map[string]string{"wb.yaml": "domain: wb\ndescriptors:\n  - key: log\n    rate_limit: {algorithm: " + algorithm +
				", unit: hour, requests_per_unit: " + strconv.Itoa(limit) + "}\n"}),
			Env: merge(standaloneEnv(rs), env, mode.env),
		})
		ctx := ctxFor(t, 10*time.Minute)
		rc := rs.Client()
		ask := func(n int, refund bool) rlsv3.RateLimitResponse_Code {
			t.Helper()
			descs := make([][]sluicetest.Entry, n)
			for i := range descs {
				descs[i] = entries("log", "full")
			}
			// A request's hits_addend, not the descriptors' own: a denial
			// is then not charged (SLUICE_CHARGE_OVER_LIMIT unset), so it
			// searches the log for its reset instead of adding an entry.
			req := sluicetest.Request("wb", 1, descs...)
			if refund {
				req = withCost(req, 1, true)
			}
			resp, err := p.Client().ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatalf("%d copies (refund %v): %v", n, refund, err)
			}
			return resp.OverallCode
		}
		send := func(n int, refund bool, want rlsv3.RateLimitResponse_Code) {
			t.Helper()
			if got := ask(n, refund); got != want {
				t.Fatalf("%d copies (refund %v): %v, want %v", n, refund, got, want)
			}
		}
		fill := func() {
			t.Helper()
			if algorithm != "sliding_log" {
				for range limit {
					if ask(1, false) != rlsv3.RateLimitResponse_OK {
						return
					}
				}
				return
			}
			n, err := rc.ZCard(ctx, "{wb|log=full}:sl.1ho").Result()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			for left := boundLogEntries - int(n); left > 0; left -= batch {
				send(min(left, batch), false, rlsv3.RateLimitResponse_OK)
			}
			if n, err := rc.ZCard(ctx, "{wb|log=full}:sl.1ho").Result(); err != nil || n != boundLogEntries {
				keys, _ := rc.Keys(ctx, "*").Result()
				t.Fatalf("log of %d entries (%v), want %d; keys %q", n, err, boundLogEntries, keys)
			}
		}
		for _, kind := range []struct {
			name   string
			refund bool
			want   rlsv3.RateLimitResponse_Code
		}{{"denied", false, rlsv3.RateLimitResponse_OVER_LIMIT}, {"refunded", true, rlsv3.RateLimitResponse_OK}} {
			var calls, longest, sum, cpu []int64
			for range rounds {
				fill()
				prep(t, ctx, rc)
				cpu0 := mainThreadCPU(t, ctx, rc)
				send(copies, kind.refund, kind.want)
				cpu1 := mainThreadCPU(t, ctx, rc)
				n, most, total := slowlogScripts(t, ctx, rc)
				calls, longest, sum, cpu = append(calls, n), append(longest, most), append(sum, total), append(cpu, cpu1-cpu0)
			}
			fmt.Fprintf(&table, "| %s, %s | %d | %s | %s | %s | %s |\n", mode.name, kind.name, copies,
				medMax(calls, ""), medMax(longest, " µs"), medMax(sum, " µs"), medMax(cpu, " µs"))
		}
		p.Stop()
	}
	t.Logf("\n%s", table.String())
}

// prep makes SLOWLOG record every command and empties it.
func prep(t *testing.T, ctx context.Context, rc *redis.Client) {
	t.Helper()
	for _, kv := range [][2]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "100000"}} {
		if err := rc.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
}

// slowlogScripts returns the script calls (FCALL, EVALSHA, EVAL) SLOWLOG
// holds, the longest and their sum, in µs.
func slowlogScripts(t *testing.T, ctx context.Context, rc *redis.Client) (n, longest, sum int64) {
	t.Helper()
	logs, err := rc.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if len(l.Args) == 0 {
			continue
		}
		switch strings.ToUpper(l.Args[0]) {
		case "FCALL", "FCALL_RO", "EVALSHA", "EVALSHA_RO", "EVAL":
			us := l.Duration.Microseconds()
			n, sum, longest = n+1, sum+us, max(longest, us)
		}
	}
	return n, longest, sum
}

var mainCPURE = regexp.MustCompile(`(?m)^used_cpu_(sys|user)_main_thread:([0-9.]+)`)

// mainThreadCPU reads redis-server's main-thread CPU time (INFO cpu), µs.
func mainThreadCPU(t *testing.T, ctx context.Context, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(ctx, "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var us int64
	for _, m := range mainCPURE.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		us += int64(v * 1e6)
	}
	return us
}

// medMax renders the median and the largest of xs.
func medMax(xs []int64, unit string) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("%d%s [%d]", s[len(s)/2], unit, s[len(s)-1])
}
