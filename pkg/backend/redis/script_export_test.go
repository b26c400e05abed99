package redis

import (
	"fmt"
	"testing"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// The tests' shorthands for a whole decide call's ARGV and reply.

// appendDecideArgs appends the ARGV of one decide call to dst: the clock,
// the cost, then five slots per rule (ten for a calendar-aligned fixed
// window), in the order of rules. KEYS must name the descriptor's counter
// key, then the key of each rule that ownsKey, in the same
// order (appendKeys). It fails for a rule no backend can store: an algorithm or unit
// outside the known ones.
//
// It is appendHead followed by prepareRule and ruleArgs.Append for each
// rule; a caller deciding the same rules often keeps the ruleArgs instead.
func appendDecideArgs(dst []any, rules []limit.Rule, cost limit.Cost, clock scriptClock) ([]any, error) {
	dst = appendHead(dst, cost, clock)
	for i, r := range rules {
		a, err := prepareRule(r)
		if err != nil {
			return dst, fmt.Errorf("rule %d: %w", i, err)
		}
		dst = a.appendTo(dst, clock)
	}
	return dst, nil
}

// parseDecideReply reads decide.lua's reply for n rules into a Decision.
func parseDecideReply(v any, n int) (limit.Decision, error) {
	arr, ok := v.([]any)
	if !ok {
		return limit.Decision{}, fmt.Errorf("%w: %T, want an array", errReply, v)
	}
	ints := make([]int64, len(arr))
	for i, x := range arr {
		v, ok := x.(int64)
		if !ok {
			return limit.Decision{}, fmt.Errorf("%w: value %d is %T, want an integer", errReply, i, x)
		}
		ints[i] = v
	}
	return parseDecideInts(ints, make([]limit.Outcome, n))
}

// mustPrepareRule is prepareRule for a rule the test knows to be valid:
// an error fails t.
func mustPrepareRule(t testing.TB, r limit.Rule) *ruleArgs {
	t.Helper()
	ra, err := prepareRule(r)
	if err != nil {
		t.Fatal(err)
	}
	return ra
}
