package scripts

import (
	"fmt"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// The tests' shorthands for a whole decide call's ARGV and reply.

// AppendDecideArgs appends the ARGV of one decide call to dst: the clock,
// the cost, then five slots per rule (ten for a calendar-aligned fixed
// window), in the order of rules. KEYS must name the descriptor's counter
// key, then the key of each rule that OwnsKey, in the same
// order (AppendKeys). It fails for a rule no backend can store: an algorithm or unit
// outside the known ones.
//
// It is AppendHead followed by PrepareRule and RuleArgs.Append for each
// rule; a caller deciding the same rules often keeps the RuleArgs instead.
func AppendDecideArgs(dst []any, rules []limit.Rule, cost limit.Cost, clock Time) ([]any, error) {
	dst = AppendHead(dst, cost, clock)
	for i, r := range rules {
		a, err := PrepareRule(r)
		if err != nil {
			return dst, fmt.Errorf("rule %d: %w", i, err)
		}
		dst = a.Append(dst, clock)
	}
	return dst, nil
}

// ParseDecideReply reads decide.lua's reply for n rules into a Decision.
func ParseDecideReply(v any, n int) (limit.Decision, error) {
	arr, ok := v.([]any)
	if !ok {
		return limit.Decision{}, fmt.Errorf("%w: %T, want an array", ErrReply, v)
	}
	ints := make([]int64, len(arr))
	for i, x := range arr {
		v, ok := x.(int64)
		if !ok {
			return limit.Decision{}, fmt.Errorf("%w: value %d is %T, want an integer", ErrReply, i, x)
		}
		ints[i] = v
	}
	return ParseDecideInts(ints, make([]limit.Outcome, n))
}
