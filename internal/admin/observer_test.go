package admin

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestTallyBuckets: a tally counts into its bucket, moves to a newer
// bucket by starting it at one, reads 0 for a bucket it does not hold,
// starts an older bucket anew too (a clock set back), and tags bucket
// numbers modulo 2³².
func TestTallyBuckets(t *testing.T) {
	const big = 1<<32 + 5 // a tag that wraps
	tests := []struct {
		name string
		adds []int64
		get  map[int64]uint64 // bucket → count read
	}{
		{"one bucket", []int64{7, 7, 7}, map[int64]uint64{7: 3, 6: 0, 8: 0, 7 + rateBuckets: 0}},
		{"a newer bucket starts at one", []int64{7, 7, 7 + rateBuckets}, map[int64]uint64{7: 0, 7 + rateBuckets: 1}},
		{"a clock set back starts the older bucket anew", []int64{7 + rateBuckets, 7 + rateBuckets, 7}, map[int64]uint64{7: 1, 7 + rateBuckets: 0}},
		{"wrapping tags", []int64{big - 1, big, big}, map[int64]uint64{big - 1: 0, big: 2, 5: 2}},
		{"nothing counted", nil, map[int64]uint64{0: 0, 7: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c tally
			for _, n := range tc.adds {
				c.add(n)
			}
			for n, want := range tc.get {
				if got := c.get(n); got != want {
					t.Errorf("get(%d) = %d, want %d", n, got, want)
				}
			}
		})
	}
}

// decided is a decided descriptor event of domain for user, denied or not.
func decided(domain, user string, denied bool) service.DescriptorEvent {
	rules := []limit.Rule{{Name: "per_user", Algorithm: limit.FixedWindow, Unit: limit.Minute, Limit: 10}}
	ev := service.DescriptorEvent{Domain: domain, Entries: []descriptor.Entry{{Key: "user", Value: user}}, Outcome: service.OutcomeOK,
		Cost: limit.Cost{N: 1}, Rules: rules, Decision: limit.Decision{Allowed: true, Outcomes: []limit.Outcome{{Allowed: true}}}}
	if denied {
		ev.Outcome, ev.Decision.Allowed, ev.Decision.Outcomes[0] = service.OutcomeOverLimit, false, limit.Outcome{Reset: time.Second}
	}
	return ev
}

// rateTotals sums each domain's decisions and denials over the history.
func rateTotals(rates []Rate) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, r := range rates {
		var sum [2]float64
		for k := range r.Decisions {
			sum[0] += r.Decisions[k] * r.StepSeconds
			sum[1] += r.Denials[k] * r.StepSeconds
		}
		if _, dup := out[r.Domain]; dup {
			out[r.Domain+" (again)"] = sum
		}
		out[r.Domain] = sum
	}
	return out
}

// TestObserverRatesConcurrent: goroutines counting descriptors of several
// domains at once, across bucket changes, lose nothing: every domain's
// decisions and denials add up exactly, each domain once, under -race.
func TestObserverRatesConcurrent(t *testing.T) {
	clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	o := NewObserver(hitters.New(hitters.Options{Now: clock.Now}), clock.Now)
	const workers, each = 4, 6_000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				o.Descriptor(decided(fmt.Sprint("d", i%3), fmt.Sprint("u", i%50), i%4 == w%4))
				if w == 0 && i%1_000 == 999 {
					clock.Advance(7 * time.Second)
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			o.Rates()
		}
	})
	wg.Wait()
	clock.Advance(rateBucket) // the last bucket is complete
	got := rateTotals(o.Rates())
	if len(got) != 3 {
		t.Fatalf("domains %v, want d0, d1, d2 once each", got)
	}
	for d := range 3 {
		name := fmt.Sprint("d", d)
		// i%3 == d: a third of each worker's events; a quarter of them denied.
		if want := [2]float64{workers * each / 3, workers * each / 3 / 4}; got[name] != want {
			t.Errorf("%s: %v decisions and denials, want %v", name, got[name], want)
		}
	}
}

// TestObserverDomainsBound: the first 32 domains get their own series; all
// further ones (also those beyond the names the map holds) are counted
// under (other), which appears once; the lock-free map of names stays
// within its bound; decisions neither decided nor denied
// (an invalid descriptor) are not counted.
func TestObserverDomainsBound(t *testing.T) {
	clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	o := NewObserver(hitters.New(hitters.Options{Now: clock.Now}), clock.Now)
	const domains = maxRateNames + 40
	for d := range domains {
		for range 2 {
			o.Descriptor(decided(fmt.Sprintf("dom%03d", d), "u", d%2 == 0))
		}
	}
	invalid := decided("dom000", "u", false)
	invalid.Outcome = service.OutcomeInvalid
	o.Descriptor(invalid)
	clock.Advance(rateBucket)
	got := rateTotals(o.Rates())
	if len(got) != maxRateDomains+1 {
		t.Fatalf("%d series, want %d and (other): %v", len(got), maxRateDomains, got)
	}
	for d := range maxRateDomains {
		want := [2]float64{2, 0}
		if d%2 == 0 {
			want[1] = 2
		}
		if name := fmt.Sprintf("dom%03d", d); got[name] != want {
			t.Errorf("%s: %v, want %v", name, got[name], want)
		}
	}
	if want := [2]float64{2 * (domains - maxRateDomains), domains - maxRateDomains}; got[otherDomain] != want {
		t.Errorf("%s: %v, want %v", otherDomain, got[otherDomain], want)
	}
	if n := len(*o.doms.Load()); n != maxRateNames {
		t.Errorf("the domain map holds %d names, want its bound %d", n, maxRateNames)
	}
}

// TestObserverProblemsAndShadow: each kind of failed, refused or
// malformed call and each failure-mode answer is counted under its own
// reason with its last error text; a shadow-mode denial counts as shadow,
// not as a denial, and stays out of the top denied.
func TestObserverProblemsAndShadow(t *testing.T) {
	clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	top := hitters.New(hitters.Options{Now: clock.Now})
	o := NewObserver(top, clock.Now)
	down := errors.New("redis: connection refused")
	backendFailed := func(mode descriptor.FailureMode) service.DescriptorEvent {
		ev := decided("api", "u", false)
		ev.BackendErr, ev.FailureMode = down, mode
		return ev
	}
	invalid := decided("api", "u", false)
	invalid.Outcome = service.OutcomeInvalid
	shadow := decided("api", "shadowed", true)
	shadow.Shadow = true
	events := []struct {
		req  *service.RequestEvent
		desc *service.DescriptorEvent
		n    int
	}{
		{req: &service.RequestEvent{Domain: "api", Err: status.Error(codes.Unavailable, "backend could not decide: "+down.Error())}, n: 3},
		{req: &service.RequestEvent{Domain: "api", Err: status.Error(codes.InvalidArgument, "too many"), Refused: service.RefusedDescriptors}, n: 2},
		{req: &service.RequestEvent{Err: status.Error(codes.InvalidArgument, "rate limit domain must not be empty")}, n: 1},
		{req: &service.RequestEvent{Domain: "api", Err: status.Error(codes.Canceled, "context canceled")}, n: 1},
		{req: &service.RequestEvent{Domain: "api"}, n: 5}, // a success: no problem
		{desc: ptr(backendFailed(descriptor.FailureAllow)), n: 4},
		{desc: ptr(backendFailed(descriptor.FailureDeny)), n: 1},
		{desc: ptr(backendFailed(descriptor.FailureLocal)), n: 1},
		{desc: &invalid, n: 2},
		{desc: &shadow, n: 6},
	}
	for _, e := range events {
		for range e.n {
			if e.req != nil {
				o.Request(*e.req)
			} else {
				o.Descriptor(*e.desc)
			}
		}
	}
	clock.Advance(rateBucket)
	got := map[string]Problem{}
	for _, p := range o.Problems() {
		got[p.Reason] = p
	}
	for reason, want := range map[string]struct {
		n    uint64
		last string
	}{
		"call failed: Unavailable":           {3, "backend could not decide: redis: connection refused"},
		"call refused: descriptors":          {2, "too many"},
		"call invalid":                       {1, "rate limit domain must not be empty"},
		"call canceled":                      {1, "context canceled"},
		"backend failed: failure_mode allow": {4, "redis: connection refused"},
		"backend failed: failure_mode deny":  {1, "redis: connection refused"},
		"backend failed: failure_mode local": {1, "redis: connection refused"},
		"descriptor invalid":                 {2, ""},
	} {
		p, ok := got[reason]
		if !ok {
			t.Errorf("no problem %q (have %v)", reason, got)
			continue
		}
		if p.Last15m != want.n || p.PerSecond != float64(want.n)/rateBucket.Seconds() || p.LastError != want.last || p.Meaning == "" {
			t.Errorf("%s: %+v, want %d with last error %q", reason, p, want.n, want.last)
		}
	}
	if len(got) != 8 {
		t.Errorf("%d problems, want 8: %v", len(got), got)
	}
	rates := o.Rates()
	var denials, shadows float64
	for _, r := range rates {
		for k := range r.Denials {
			denials += r.Denials[k] * r.StepSeconds
			shadows += r.Shadow[k] * r.StepSeconds
		}
	}
	if denials != 0 || shadows != 6 {
		t.Errorf("%v denials and %v shadow-mode denials, want 0 and 6", denials, shadows)
	}
	if d := top.Top(hitters.Denials, hitters.Minute, "", "", 10); len(d) != 0 {
		t.Errorf("shadow-mode denials in the top denied: %v", d)
	}
}

func ptr[T any](v T) *T { return &v }
