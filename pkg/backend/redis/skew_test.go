package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestSkewedInstancesAdmitExactlyTheLimit runs two backends on one cluster
// whose own clocks are 30s apart (as two service instances might be), 50
// goroutines each, on the production path: both decide on Redis's TIME, and
// their clocks only place calendar windows. Every exact algorithm must admit
// exactly its limit, no more, no less (and so does sliding_window, which
// is exact while its previous window is empty).
//
// The calendar rule uses a zone whose midnight falls 20s after the start,
// so the instance 30s ahead computes its windows around the next day and
// the script must pick the previous one; the run is retried if it takes so
// long that Redis's clock itself passes that midnight.
func TestSkewedInstancesAdmitExactlyTheLimit(t *testing.T) {
	c := cluster.Get(t)
	const limitN = 37
	for attempt := 1; ; attempt++ {
		rc := c.Client()
		tm, err := rc.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		midnight := tm.Add(20 * time.Second).UTC()
		zone := time.FixedZone("skew", -(midnight.Hour()*3600 + midnight.Minute()*60 + midnight.Second()))
		if ok := runSkewed(t, zone, limitN, attempt); ok {
			after, err := rc.Time(context.Background()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if after.Before(midnight) {
				return
			}
		}
		if attempt == 3 {
			t.Fatal("three runs straddled the calendar boundary; the machine is too slow for this test")
		}
	}
}

// runSkewed runs the load once; it reports false only when the calendar
// rule's count is off and Redis passed the zone's midnight meanwhile (the
// caller retries then). Other failures fail t.
func runSkewed(t *testing.T, zone *time.Location, limitN uint64, attempt int) bool {
	opts := clusterOptions(cluster.Get(t))
	opts.KeyPrefix = fmt.Sprintf("skew%d:", attempt)
	ahead, behind := opts, opts
	ahead.Clock = func() time.Time { return time.Now().Add(30 * time.Second) }
	behind.Clock = func() time.Time { return time.Now().Add(-30 * time.Second) }
	backends := []*Backend{newBackend(t, ahead), newBackend(t, behind)}

	// Periods long enough that nothing refills or rolls over during the run.
	century := limit.Rule{Unit: limit.Year, Multiplier: 100}
	rules := map[string]limit.Rule{
		"fixed_window":   {Unit: century.Unit, Multiplier: century.Multiplier, Limit: limitN},
		"calendar_day":   {Unit: limit.Day, Limit: limitN, Location: zone},
		"sliding_log":    {Algorithm: limit.SlidingLog, Unit: limit.Year, Limit: limitN},
		"token_bucket":   {Algorithm: limit.TokenBucket, Unit: century.Unit, Multiplier: century.Multiplier, Limit: 1, Burst: limitN},
		"leaky_bucket":   {Algorithm: limit.LeakyBucket, Unit: century.Unit, Multiplier: century.Multiplier, Limit: 1, Burst: limitN},
		"gcra":           {Algorithm: limit.GCRA, Unit: century.Unit, Multiplier: century.Multiplier, Limit: 1, Burst: limitN},
		"sliding_window": {Algorithm: limit.SlidingWindow, Unit: century.Unit, Multiplier: century.Multiplier, Limit: limitN},
	}
	ok := true
	for name, r := range rules {
		var admitted, errs atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, b := range backends {
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 2 {
						res := b.Decide(context.Background(), []backend.Check{{Identity: "skew|" + name, Rules: []limit.Rule{r}, Cost: limit.Cost{N: 1}}})
						switch {
						case res[0].Err != nil:
							errs.Add(1)
							t.Errorf("%s: %v", name, res[0].Err)
						case res[0].Allowed:
							admitted.Add(1)
						}
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		if errs.Load() > 0 {
			continue
		}
		if got := admitted.Load(); got != int64(limitN) {
			if name == "calendar_day" && attempt < 3 {
				t.Logf("%s admitted %d, want %d; retrying in case the run straddled midnight", name, got, limitN)
				ok = false
				continue
			}
			t.Errorf("%s: 200 requests from two instances 60s apart admitted %d, want exactly %d", name, got, limitN)
		}
	}
	return ok
}
