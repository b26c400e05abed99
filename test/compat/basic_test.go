package compat

import (
	"bufio"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// runtimeConfig are the incumbent's integration-test config files.
var runtimeConfig = []string{
	"runtime/ratelimit/config/basic.yaml",
	"runtime/ratelimit/config/another.yaml",
	"runtime/ratelimit/config/share_threshold.yaml",
}

// TestBasic is the incumbent's core integration scenario
// (testBasicBaseConfig) under each settings variant its tests run it with:
// an unknown domain, a 50/s key, a 20/min key driven over its limit, two
// descriptors in one request until the 10/h one runs out, and the time to
// reset counting down.
func TestBasic(t *testing.T) {
	for _, v := range basicVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, nil, runtimeConfig...)
			// The incumbent's test uses the "_local" keys when its local
			// cache is on; both sets carry the same limits.
			key := func(k string) string {
				if strings.Contains(v.name, "local-cache") {
					return k + "_local"
				}
				return k
			}

			// An unknown domain: OK, no limit.
			resp := s.ask(t, rq("foo", d(key("hello"), "world")))
			expect(t, "unknown domain", answerOf(resp), ans(ok, noLimit))

			// key1: 50 per second, 49 left.
			resp = s.ask(t, rq("basic", d(key("key1"), sluicetest.Unique("foo"))))
			expect(t, "key1", answerOf(resp), ans(ok, limited(ok, 50, "SECOND", 49)))
			checkDuration(t, "key1", resp)

			// key2: 20 per minute; 25 calls, the last 5 over the limit.
			sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
			value := sluicetest.Unique("key2")
			for i := range 25 {
				resp := s.ask(t, rq("another", d(key("key2"), value)))
				want := ans(ok, limited(ok, 20, "MINUTE", uint32(20-(i+1))))
				if i >= 20 {
					want = ans(over, limited(over, 20, "MINUTE", 0))
				}
				expect(t, fmt.Sprintf("key2 call %d", i+1), answerOf(resp), want)
				checkDuration(t, fmt.Sprintf("key2 call %d", i+1), resp)
			}

			// key2 (20/min) and key3 (10/h) together, 15 calls: key3 runs out
			// after 10 and the request is over the limit. With
			// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT the incumbent then
			// stops counting key2 as well.
			sluicetest.AwayFromEdge(t, time.Hour, 0, 5*time.Second)
			sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
			value = sluicetest.Unique("r2")
			for i := range 15 {
				resp := s.ask(t, rq("another", d(key("key2"), value), d(key("key3"), value)))
				counting := limited(ok, 20, "MINUTE", uint32(20-(i+1)))
				if i < 10 {
					expect(t, fmt.Sprintf("key2+key3 call %d", i+1), answerOf(resp),
						ans(ok, counting, limited(ok, 10, "HOUR", uint32(10-(i+1)))))
					continue
				}
				key3 := limited(over, 10, "HOUR", 0)
				if v.stopIncrement {
					expect(t, fmt.Sprintf("key2+key3 call %d", i+1), answerOf(resp),
						ans(over, limited(ok, 20, "MINUTE", 10), key3))
					continue
				}
				expect(t, fmt.Sprintf("key2+key3 call %d", i+1), answerOf(resp), ans(over, counting, key3))
			}

			// Per-node counts, as the incumbent's stats
			// (ratelimit.service.rate_limit.another.key2.total_hits, ...).
			for _, c := range []struct{ family, node, want string }{
				{"sluice_rate_limit_total_hits_total", key("key2"), "40"},
				{"sluice_rate_limit_over_limit_total", key("key2"), "5"},
				{"sluice_rate_limit_total_hits_total", key("key3"), "15"},
				{"sluice_rate_limit_over_limit_total", key("key3"), "5"},
			} {
				got := metricText(t, s, c.family, map[string]string{"domain": "another", "descriptor": c.node})
				expect(t, c.family+" of "+c.node, got, c.want)
			}

			// The time to reset counts down between two calls.
			value = sluicetest.Unique("durTest")
			first := s.ask(t, rq("another", d(key("key4"), value)))
			second := s.ask(t, rq("another", d(key("key4"), value)))
			checkDuration(t, "key4", first)
			checkDuration(t, "key4", second)
			d1, d2 := first.Statuses[0].DurationUntilReset.AsDuration(), second.Statuses[0].DurationUntilReset.AsDuration()
			if d2 > d1 {
				t.Errorf("key4: duration_until_reset grew from %v to %v", d1, d2)
			}
		})
	}
}

// TestShareThreshold is the incumbent's share_threshold scenario: values
// matching a share_threshold wildcard share one counter; values matching a
// plain wildcard each have their own.
func TestShareThreshold(t *testing.T) {
	for _, v := range core {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, nil, runtimeConfig...)
			const domain = "share-threshold-test"
			sluicetest.AwayFromEdge(t, time.Hour, 0, 5*time.Second)
			// The shared counter is one per run of the test in the
			// incumbent's too (a fresh Redis); make it fresh here by the key
			// prefix or a fresh backend, and send 10 hits.
			for i := range 10 {
				resp := s.ask(t, rq(domain, d("files", "files/a.pdf")))
				if c := resp.GetOverallCode(); c != ok && c != over {
					t.Fatalf("files/a.pdf call %d: %v", i+1, c)
				}
			}
			resp := s.ask(t, rq(domain, d("files", "files/b.csv")))
			expect(t, "files/b.csv after 10 hits on files/a.pdf", answerOf(resp), ans(over, limited(over, 10, "HOUR", 0)))

			for i := range 10 {
				resp := s.ask(t, rq(domain, d("files_no_share", sluicetest.Unique("files_no_share/x"))))
				expect(t, fmt.Sprintf("files_no_share value %d", i+1), answerOf(resp), ans(ok, limited(ok, 10, "HOUR", 9)))
			}
		})
	}
}

// TestReload is the incumbent's reload scenario (testConfigReload): a file
// added to the config directory is loaded and its limits apply; removing it
// is a reload too. Both the watched-root and the plain layout.
func TestReload(t *testing.T) {
	for _, v := range []variant{memory, standalone} {
		for _, watchRoot := range []string{"true", "false"} {
			t.Run(v.name+"/RUNTIME_WATCH_ROOT="+watchRoot, func(t *testing.T) {
				t.Parallel()
				s := start(t, v, map[string]string{"RUNTIME_WATCH_ROOT": watchRoot}, runtimeConfig...)
				block := sluicetest.Unique("foo")
				resp := s.ask(t, rq("reload", d("block", block)))
				expect(t, "reload domain before its file exists", answerOf(resp), ans(ok, noLimit))

				before := reloads(t, s)
				copyFile(t, filepath.Join("testdata", "reload.yaml"), filepath.Join(s.dir, "reload.yaml"))
				testenv.Until(t, 10*time.Second, "the added file to load", func() bool { return reloads(t, s) > before })

				resp = s.ask(t, rq("reload", d("key1", sluicetest.Unique("foo"))))
				expect(t, "key1 of the added file", answerOf(resp), ans(ok, limited(ok, 50, "SECOND", 49)))

				before = reloads(t, s)
				if err := os.Remove(filepath.Join(s.dir, "reload.yaml")); err != nil {
					t.Fatal(err)
				}
				testenv.Until(t, 10*time.Second, "the removal to reload", func() bool { return reloads(t, s) > before })
				resp = s.ask(t, rq("reload", d("block", block)))
				expect(t, "reload domain after its file is removed", answerOf(resp), ans(ok, noLimit))
			})
		}
	}
}

// metricText is the value, as text, of the series of family whose labels
// include labels; "absent" if there is none.
func metricText(t *testing.T, s *server, family string, labels map[string]string) string {
	t.Helper()
	v, found := metricWith(t, s, family, labels)
	if !found {
		return "absent"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// TestHitsAddend is the incumbent's cost arithmetic (test/redis, hits_addend
// above 1): a request's cost is added before the limit is checked, so a
// cost that does not fit is over the limit and reports 0 left.
func TestHitsAddend(t *testing.T) {
	for _, v := range core {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, nil, runtimeConfig...)
			costly := requestCost(t, s, sluicetest.Unique("cost"))
			expect(t, "cost 17 of 20", costly(17), ans(ok, limited(ok, 20, "DAY", 3)))
			expect(t, "cost 2, 19 of 20", costly(2), ans(ok, limited(ok, 20, "DAY", 1)))
			expect(t, "cost 3 with 1 left", costly(3), ans(over, limited(over, 20, "DAY", 0)),
				because(devRemainingOnDenial, ans(over, limited(over, 20, "DAY", 1))))
			expect(t, "cost 1 after the denied cost", costly(1), ans(over, limited(over, 20, "DAY", 0)),
				because(devDeniedNothing, ans(ok, limited(ok, 20, "DAY", 0))))
		})
	}
}

// requestCost returns a function asking for another's key4=value with
// the request-level hits_addend n.
func requestCost(t *testing.T, s *server, value string) func(n uint32) answer {
	return func(n uint32) answer {
		req := rq("another", d("key4", value))
		req.HitsAddend = n
		return answerOf(s.ask(t, req))
	}
}

// TestHitsAddendCharged: with SLUICE_CHARGE_OVER_LIMIT=true a request's
// hits_addend is charged when it does not fit, as the incumbent counts it,
// so every answer of TestHitsAddend and TestCostAboveTheLimit is the
// incumbent's: the restoring setting of remaining-on-denial and
// denied-consumes-nothing.
func TestHitsAddendCharged(t *testing.T) {
	for _, v := range core {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, map[string]string{"SLUICE_CHARGE_OVER_LIMIT": "true"}, runtimeConfig...)
			costly := requestCost(t, s, sluicetest.Unique("cost"))
			expect(t, "cost 17 of 20", costly(17), ans(ok, limited(ok, 20, "DAY", 3)))
			expect(t, "cost 2, 19 of 20", costly(2), ans(ok, limited(ok, 20, "DAY", 1)))
			expect(t, "cost 3 with 1 left", costly(3), ans(over, limited(over, 20, "DAY", 0)))
			expect(t, "cost 1 after the denied cost", costly(1), ans(over, limited(over, 20, "DAY", 0)))
			req := rq("another", d("key4", sluicetest.Unique("cost")))
			req.HitsAddend = 25
			expect(t, "cost 25 of 20", answerOf(s.ask(t, req)), ans(over, limited(over, 20, "DAY", 0)))
		})
	}
}

// TestDescriptorHitsAddend is the same arithmetic with the cost in the
// descriptor's own hits_addend (the field Envoy fills from a route rate
// limit's hits_addend, and the only one a response-path debit can use): a
// cost that does not fit is over the limit, reports 0 left and is counted,
// so the next cost of 1 is over too, with no setting, as the incumbent.
func TestDescriptorHitsAddend(t *testing.T) {
	for _, v := range core {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, nil, runtimeConfig...)
			value := sluicetest.Unique("cost")
			costly := func(n uint64) answer {
				return answerOf(s.ask(t, rq("another", d("key4", value).hits(n))))
			}
			expect(t, "cost 17 of 20", costly(17), ans(ok, limited(ok, 20, "DAY", 3)))
			expect(t, "cost 2, 19 of 20", costly(2), ans(ok, limited(ok, 20, "DAY", 1)))
			expect(t, "cost 3 with 1 left", costly(3), ans(over, limited(over, 20, "DAY", 0)))
			expect(t, "cost 1 after the denied cost", costly(1), ans(over, limited(over, 20, "DAY", 0)))
		})
	}
}

// TestCostAboveTheLimit: a cost larger than the whole limit is denied, as
// the incumbent denies it, with the window's end as its reset, as for
// every limited status (so Envoy's x-ratelimit-reset does not say "now"
// for a cost that waiting cannot make fit); sluice reports what is really
// left (remaining-on-denial).
func TestCostAboveTheLimit(t *testing.T) {
	for _, v := range core {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, nil, runtimeConfig...)
			req := rq("another", d("key4", sluicetest.Unique("cost")))
			req.HitsAddend = 25
			resp := s.ask(t, req)
			expect(t, "cost 25 of 20", answerOf(resp), ans(over, limited(over, 20, "DAY", 0)),
				because(devRemainingOnDenial, ans(over, limited(over, 20, "DAY", 20))))
			checkDuration(t, "cost 25 of 20", resp)
		})
	}
}

// reloads reads sluice_config_reloads_total{result="success"} (the
// incumbent's config_load_success) from /metrics.
func reloads(t *testing.T, s *server) float64 {
	t.Helper()
	v, _ := metric(t, s, `sluice_config_reloads_total{result="success"}`)
	return v
}

// metric reads one series (name with its labels, exactly as exposed) from
// /metrics; found is false when it is not there.
func metric(t *testing.T, s *server, series string) (value float64, found bool) {
	t.Helper()
	for _, m := range scrape(t, s) {
		if m.series == series {
			return m.value, true
		}
	}
	return 0, false
}

// metricWith reads the first series of family whose labels include labels.
func metricWith(t *testing.T, s *server, family string, labels map[string]string) (value float64, found bool) {
	t.Helper()
next:
	for _, m := range scrape(t, s) {
		if m.family != family {
			continue
		}
		for k, v := range labels {
			if m.labels[k] != v {
				continue next
			}
		}
		return m.value, true
	}
	return 0, false
}

// sample is one line of the Prometheus text format.
type sample struct {
	series, family string
	labels         map[string]string
	value          float64
}

// labelRE matches one label pair of a series.
var labelRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape reads every sample of /metrics.
func scrape(t *testing.T, s *server) []sample {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var out []sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 {
			continue
		}
		f, err := strconv.ParseFloat(line[cut+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		m := sample{series: line[:cut], family: line[:cut], labels: map[string]string{}, value: f}
		if i := strings.IndexByte(m.series, '{'); i >= 0 {
			m.family = m.series[:i]
			for _, l := range labelRE.FindAllStringSubmatch(m.series[i:], -1) {
				m.labels[l[1]] = l[2]
			}
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return out
}
