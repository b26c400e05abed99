package backend

import (
	"testing"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestWeight: a rule weighs 1, a sliding log SlidingLogWeight, whatever
// the rule's limit or period; no rules weigh nothing.
func TestWeight(t *testing.T) {
	fw := limit.Rule{Algorithm: limit.FixedWindow, Unit: limit.Second, Limit: 10}
	sl := limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 20000}
	tb := limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 5}
	for _, tc := range []struct {
		name  string
		rules []limit.Rule
		want  int
	}{
		{"none", nil, 0},
		{"one fixed window", []limit.Rule{fw}, 1},
		{"one sliding log", []limit.Rule{sl}, SlidingLogWeight},
		{"mixed", []limit.Rule{fw, sl, tb, sl}, 2 + 2*SlidingLogWeight},
	} {
		if got := Weight(tc.rules); got != tc.want {
			t.Errorf("%s: Weight = %d, want %d", tc.name, got, tc.want)
		}
	}
}
