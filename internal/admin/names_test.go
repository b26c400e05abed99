package admin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// joinedNames is the plain way to name rules decided together, which
// nameCache must answer alike: each rule's name, else its id ("override
// <id>" for a request's override), joined by "+".
func joinedNames(rules []limit.Rule, override bool) string {
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = ruleName(r.Name, r.ID(), override)
	}
	return strings.Join(names, "+")
}

// TestNameCache: the cache names single rules and rule sets as the plain
// join does (named and unnamed rules, multipliers, algorithms, locations,
// overrides, a set longer than its stack buffer), the same on the second
// call, allocating nothing once a name is known; past its bound it keeps
// answering right without growing.
func TestNameCache(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	perUser := limit.Rule{Name: "per_user", Unit: limit.Minute, Limit: 10}
	unnamed := limit.Rule{Unit: limit.Second, Limit: 50}
	tests := []struct {
		name     string
		rules    []limit.Rule
		override bool
	}{
		{"named", []limit.Rule{perUser}, false},
		{"unnamed", []limit.Rule{unnamed}, false},
		{"unnamed, another limit, same id", []limit.Rule{{Unit: limit.Second, Limit: 7}}, false},
		{"multiplier", []limit.Rule{{Unit: limit.Second, Multiplier: 5, Limit: 50}}, false},
		{"multiplier one is none", []limit.Rule{{Unit: limit.Second, Multiplier: 1, Limit: 50}}, false},
		{"hour", []limit.Rule{{Unit: limit.Hour, Limit: 5}}, false},
		{"algorithm", []limit.Rule{{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 5, Burst: 9}}, false},
		{"day", []limit.Rule{{Unit: limit.Day, Limit: 5}}, false},
		{"location", []limit.Rule{{Unit: limit.Day, Limit: 5, Location: paris}}, false},
		{"override", []limit.Rule{unnamed}, true},
		{"override named", []limit.Rule{perUser}, true},
		{"set", []limit.Rule{perUser, unnamed, {Name: "daily", Unit: limit.Day, Limit: 1000}}, false},
		{"set of overrides", []limit.Rule{unnamed, {Unit: limit.Hour, Limit: 3}}, true},
		{"set longer than the buffer", []limit.Rule{{Name: strings.Repeat("a", 200)}, {Name: strings.Repeat("b", 200)}}, false},
	}
	var c nameCache
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := joinedNames(tc.rules, tc.override)
			for call := range 2 {
				if got := c.set(tc.rules, tc.override); got != want {
					t.Fatalf("call %d: %q, want %q", call, got, want)
				}
			}
			if allocs := testing.AllocsPerRun(100, func() { c.set(tc.rules, tc.override) }); allocs != 0 && len(want) <= 256 {
				t.Errorf("%v allocations per known name, want 0", allocs)
			}
		})
	}
	for i := range 2 * maxCachedNames {
		sets := []limit.Rule{{Name: fmt.Sprint("r", i)}, {Unit: limit.Unit(100 + i)}}
		if got, want := c.set(sets, false), joinedNames(sets, false); got != want {
			t.Fatalf("set %d: %q, want %q", i, got, want)
		}
	}
	if ids, sets := len(*c.ids.Load()), len(*c.sets.Load()); ids != maxCachedNames || sets != maxCachedNames {
		t.Errorf("%d ids and %d sets kept, want the bound %d each", ids, sets, maxCachedNames)
	}
}
