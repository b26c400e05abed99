package hitters

import (
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

func user(v string) []descriptor.Entry { return []descriptor.Entry{{Key: "user", Value: v}} }

// TestHeavyItemFoundAmongManyDistinct: a descriptor denied 2,000 times is
// at the top although 100,000 distinct descriptors were denied once each,
// its count within the stated error, and the memory used is the fixed
// number of counters.
func TestHeavyItemFoundAmongManyDistinct(t *testing.T) {
	clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := New(Options{Capacity: 16, Now: clock.Now})
	for i := range 100_000 {
		tr.Record("api", user(fmt.Sprint("noise-", i)), "per_user", 1, true, "per_user", time.Second)
		if i%50 == 0 {
			tr.Record("api", user("alice"), "per_user", 1, true, "per_user", 30*time.Second)
		}
	}
	top := tr.Top(Denials, Minute, "", "", 3)
	if len(top) == 0 || top[0].Descriptor != "user=alice" {
		t.Fatalf("top denials = %+v, want user=alice first", top)
	}
	if got := top[0]; got.Count < 2000 || got.Count-got.Error > 2000 {
		t.Errorf("alice: count %d error %d, want count-error ≤ 2000 ≤ count", got.Count, got.Error)
	}
	if want := clock.Now().Add(30 * time.Second); !top[0].ResetAt.Equal(want) {
		t.Errorf("alice reset at %v, want %v", top[0].ResetAt, want)
	}
	held := 0
	for s := range tr.shards {
		for k := range kinds {
			for w := range windows {
				for _, sum := range tr.shards[s].rings[k][w].sums {
					held += len(sum.counters)
					if n := sum.index.occupied(); n != len(sum.counters) {
						t.Fatalf("index holds %d keys for %d counters", n, len(sum.counters))
					}
				}
			}
		}
	}
	if limit := shards * int(kinds) * 16 * (6 + 12); held > limit {
		t.Errorf("%d counters held, more than the fixed %d", held, limit)
	}
}

// TestWindows: counts leave the minute window after a minute and the hour
// window after an hour; hits are weighted by cost; filters by domain and
// rule apply.
func TestWindows(t *testing.T) {
	clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := New(Options{Now: clock.Now})
	tr.Record("api", user("bob"), "per_user+daily", 5, false, "", 0)
	tr.Record("api", user("bob"), "per_user+daily", 1, true, "per_user", time.Second)
	tr.Record("web", []descriptor.Entry{{Key: "ip", Value: "10.0.0.1"}}, "per_ip", 1, true, "per_ip", time.Second)
	tests := []struct {
		after        time.Duration
		kind         Kind
		window       Window
		domain, rule string
		want         string // "descriptor:count,..."
	}{
		{0, Hits, Minute, "", "", "user=bob:6,ip=10.0.0.1:1"},
		{0, Denials, Minute, "api", "", "user=bob:1"},
		{0, Denials, Minute, "", "per_ip", "ip=10.0.0.1:1"},
		{0, Denials, Minute, "", "per_user", "user=bob:1"},
		{0, Hits, Minute, "", "per_user+daily", "user=bob:6"},
		{0, Denials, Minute, "nope", "", ""},
		{59 * time.Second, Hits, Minute, "api", "", "user=bob:6"},
		{61 * time.Second, Hits, Minute, "", "", ""},
		{61 * time.Second, Hits, Hour, "api", "", "user=bob:6"},
		{61 * time.Minute, Hits, Hour, "", "", ""},
	}
	start := clock.Now()
	for _, tc := range tests {
		clock.Advance(start.Add(tc.after).Sub(clock.Now()))
		var got []string
		for _, e := range tr.Top(tc.kind, tc.window, tc.domain, tc.rule, 10) {
			got = append(got, fmt.Sprintf("%s:%d", e.Descriptor, e.Count))
		}
		if g := strings.Join(got, ","); g != tc.want {
			t.Errorf("after %v, kind %d window %v domain %q rule %q: got %q, want %q", tc.after, tc.kind, tc.window, tc.domain, tc.rule, g, tc.want)
		}
	}
}

func TestLongValuesAreCut(t *testing.T) {
	tr := New(Options{MaxValueLen: 8})
	tr.Record("api", user(strings.Repeat("é", 10)), "r", 1, true, "r", 0)
	top := tr.Top(Denials, Minute, "", "", 1)
	if len(top) != 1 || top[0].Descriptor != "user=éééé…" {
		t.Fatalf("got %+v, want the value cut to 8 bytes", top)
	}
}
