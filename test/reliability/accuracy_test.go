package reliability

import (
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// accLimit is every accuracy rule's limit: L per second per user (and the
// meters' burst).
const accLimit = 50

// accPeriod is the rules' period, P.
const accPeriod = time.Second

// accPause is each client's pause between calls: 150 clients then ask
// about 3000 calls/s in all (1000/s per user, 20 times the limit), a rate
// the machine can answer in a few milliseconds, so that each admission's
// time is known closely. (Unpaced, they saturate the CPU and calls take
// hundreds of milliseconds, which blurs the measurement, not the bounds.)
const accPause = 50 * time.Millisecond

// accAlgorithms are the rules under test, one descriptor key each.
var accAlgorithms = []struct {
	name string
	alg  limit.Algorithm
}{
	{"fixed_window", limit.FixedWindow},
	{"sliding_log", limit.SlidingLog},
	{"sliding_window", limit.SlidingWindow},
	{"token_bucket", limit.TokenBucket},
	{"leaky_bucket", limit.LeakyBucket},
	{"gcra", limit.GCRA},
}

// accYAML gives each algorithm's key one rule of accLimit per second.
func accYAML() string {
	var b strings.Builder
	b.WriteString("domain: acc\ndescriptors:\n")
	for _, a := range accAlgorithms {
		burst := ""
		if a.alg.IsMeter() {
			burst = fmt.Sprintf(", burst: %d", accLimit)
		}
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {algorithm: %s, unit: second, requests_per_unit: %d%s}\n", a.name, a.name, accLimit, burst)
	}
	return b.String()
}

// interval is when one admission was decided: Redis read its clock (TIME,
// the same CLOCK_REALTIME as this process on this host) between the
// client's send and its receipt of the answer.
type interval struct{ start, end time.Time }

func (i interval) mid() time.Time { return i.start.Add(i.end.Sub(i.start) / 2) }

// admissionsOf returns the admitted calls of key, by start.
func admissionsOf(samples []sample, key string) []interval {
	var out []interval
	for _, s := range samples {
		if s.key == key && s.admitted() {
			out = append(out, interval{s.start, s.end})
		}
	}
	slices.SortFunc(out, func(a, b interval) int { return a.start.Compare(b.start) })
	return out
}

// maxDefinite returns the most admissions certainly decided within one
// half-open period [a, a+p): those whose whole interval lies in it. It is
// a lower bound of the true count of the busiest period, so asserting
// on it can never fail for the clients' timing uncertainty.
func maxDefinite(adm []interval, p time.Duration) int {
	best := 0
	for _, w := range adm {
		a, b := w.start, w.start.Add(p)
		n := 0
		for _, x := range adm {
			if !x.start.Before(a) && x.end.Before(b) {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// maxMidpoint returns the most admissions whose interval midpoint falls
// in one period [a, a+p): the best estimate of the busiest period.
func maxMidpoint(adm []interval, p time.Duration) int {
	mids := make([]time.Time, len(adm))
	for i, x := range adm {
		mids[i] = x.mid()
	}
	slices.SortFunc(mids, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range mids {
		for mids[i].Sub(mids[j]) >= p {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// meterExcess checks the meters' exact bound: whatever the interval
// [a, b], at most burst + L·(b−a)/P admissions fall in it. It counts, for
// every pair of admissions, those certainly decided between the first's
// send and the second's answer, and returns the largest count above the
// bound (≤ 0 when the bound holds) and that count.
func meterExcess(adm []interval, burst, limit float64, p time.Duration) (excess float64, count int) {
	excess = -burst
	for j, first := range adm {
		for _, last := range adm[j:] {
			a, b := first.start, last.end
			n := 0
			for _, x := range adm {
				if !x.start.Before(a) && !x.end.After(b) {
					n++
				}
			}
			if e := float64(n) - (burst + limit*float64(b.Sub(a))/float64(p)); e > excess {
				excess, count = e, n
			}
		}
	}
	return excess, count
}

// TestAccuracyUnderLoad runs three sluice instances (each its own service,
// Redis backend and gRPC server) on one 3-master Redis Cluster, with 150
// concurrent clients (50 per instance) asking far more than the limit of
// three users (one per master), for every algorithm in turn, a few
// seconds each. Each admission is known to have been decided between the
// client's send and its answer; from those intervals:
//   - fixed_window: admitted per window ≤ L, and exactly L in every window
//     the test fully covered;
//   - sliding_log: admitted in any rolling period ≤ L;
//   - token_bucket, leaky_bucket, gcra: admitted in any interval of length
//     T ≤ burst + L·T/P;
//   - sliding_window: the busiest rolling period is measured against an
//     exact sliding log of the same admissions and must stay under the
//     documented bound L + prev·e/P < 2L.
func TestAccuracyUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and 150 clients")
	}
	c := redistest.Cluster(t, redistest.ClusterOptions{})
	const prefix = "acc:"
	var clients []rlsv3.RateLimitServiceClient
	for range 3 {
		be := newRedis(t, redis.Options{Type: redis.TypeCluster, URL: strings.Join(c.Addrs(), ","), KeyPrefix: prefix})
		// ResetMillis: windowOf finds a sample's 1 s window from its
		// duration_until_reset, which whole seconds would blur.
		clients = append(clients, startStack(t, service.Options{Backend: be, ResetMillis: true}, accYAML()).Client)
	}
	var report []string
	for _, a := range accAlgorithms {
		t.Run(a.name, func(t *testing.T) {
			var users []string
			for _, u := range valuesPerMaster(t, c, prefix, "acc", a.name, limit.Rule{Algorithm: a.alg, Unit: limit.Second}) {
				users = append(users, u)
			}
			slices.Sort(users)
			l := startLoad(clients, 150, accPause, func(w, i int) request {
				u := users[(w+i)%len(users)]
				return request{key: u, req: rq("acc", desc(a.name, u))}
			})
			// About three periods of admissions for every user.
			testenv.Until(t, 60*time.Second, "three periods of admissions", func() bool {
				return l.admitted.Load() >= int64(len(users))*(3*accLimit+accLimit)
			})
			samples := l.finish()
			s := summarize(samples)
			if s.calls != s.outcomes["OK"]+s.outcomes["OVER_LIMIT"] {
				t.Fatalf("calls failed: %s", s)
			}
			for _, u := range users {
				line := checkAccuracy(t, a.alg, u, samples)
				report = append(report, fmt.Sprintf("%-14s %s", a.name, line))
			}
			t.Logf("%s; demand %.0f calls/s for a limit of %d/s per user",
				s, float64(s.calls)/float64(len(users))/samples[len(samples)-1].end.Sub(samples[0].start).Seconds(), accLimit)
		})
	}
	t.Logf("accuracy (L=%d per %v per user, 3 instances, 150 clients):\n%s", accLimit, accPeriod, strings.Join(report, "\n"))
}

// checkAccuracy checks one user's admissions against its algorithm's
// bound and returns a line for the report.
func checkAccuracy(t *testing.T, alg limit.Algorithm, user string, samples []sample) string {
	t.Helper()
	adm := admissionsOf(samples, user)
	var first, last time.Time
	for _, s := range samples {
		if s.key != user {
			continue
		}
		if first.IsZero() {
			first = s.start
		}
		if s.end.After(last) {
			last = s.end
		}
	}
	definite, midpoint := maxDefinite(adm, accPeriod), maxMidpoint(adm, accPeriod)
	span := last.Sub(first)
	line := fmt.Sprintf("%s: %d admitted in %v; busiest period: %d certain, %d by midpoint",
		user, len(adm), span.Round(time.Millisecond), definite, midpoint)
	switch alg {
	case limit.FixedWindow:
		perWindow := map[time.Time]int{}
		for _, s := range samples {
			if s.key == user && s.admitted() {
				w := windowOf(s, accPeriod)
				if !s.start.Before(w) || s.end.Before(w.Add(-accPeriod)) {
					t.Fatalf("%s: admission [%v, %v] cannot belong to the window ending %v", user, s.start, s.end, w)
				}
				perWindow[w]++
			}
		}
		full := 0
		for w, n := range perWindow {
			if n > accLimit {
				t.Errorf("%s: window ending %v admitted %d, limit %d", user, w, n, accLimit)
			}
			if w.Add(-accPeriod).After(first) && w.Before(last) { // the test covered it whole
				full++
				if n != accLimit {
					t.Errorf("%s: full window ending %v admitted %d, want exactly %d (demand exceeded it)", user, w, n, accLimit)
				}
			}
		}
		line += fmt.Sprintf("; %d windows, %d fully covered, each exactly %d", len(perWindow), full, accLimit)
	case limit.SlidingLog:
		if definite > accLimit {
			t.Errorf("%s: %d admissions certainly within one period, limit %d", user, definite, accLimit)
		}
	case limit.SlidingWindow:
		// The documented bound: admitted in any rolling period ≤ L +
		// prev·e/P < 2L.
		if definite >= 2*accLimit {
			t.Errorf("%s: %d admissions certainly within one period, bound < %d", user, definite, 2*accLimit)
		}
		line += fmt.Sprintf("; excess over L: %d certain, %d by midpoint (bound < %d)", definite-accLimit, midpoint-accLimit, accLimit)
	default: // the meters, burst = L
		excess, n := meterExcess(adm, accLimit, accLimit, accPeriod)
		if excess > 1e-9 {
			t.Errorf("%s: %d admissions within an interval allowing %.3f", user, n, float64(n)-excess)
		}
		line += fmt.Sprintf("; burst+L·T/P never exceeded (closest: %.2f under)", -excess)
	}
	return line
}

// valuesPerMaster finds one value of key in domain per master whose state
// (under rule) lives on that master, and returns master → value.
func valuesPerMaster(t *testing.T, c *redistest.ClusterSet, prefix, domain, key string, rule limit.Rule) map[string]string {
	t.Helper()
	value := func(i int) string { return "u" + strconv.Itoa(i) }
	out := map[string]string{}
	for m, i := range c.OnePerMaster(t, func(i int) string {
		// Every key of a descriptor hashes to its counter key's slot.
		return redis.CounterKey(prefix, identity.Encode(domain, []identity.Entry{{Key: key, Value: value(i)}}))
	}) {
		out[m] = value(i)
	}
	return out
}
