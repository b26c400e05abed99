package redis

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// wire renders args as go-redis writes them: every argument a decimal
// string (or the string itself).
func wire(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = fmt.Sprint(a)
	}
	return out
}

func TestAppendDecideArgsWire(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	at := limit.MicrosOf(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	tests := []struct {
		name  string
		rules []limit.Rule
		cost  limit.Cost
		clock scriptClock
		want  []string // after the three head slots
		head  []string
	}{
		{
			name:  "fixed window, production clock",
			rules: []limit.Rule{{Unit: limit.Minute, Multiplier: 5, Limit: 3}},
			cost:  limit.Cost{N: 1},
			head:  []string{"", "1", "0"},
			want:  []string{"1", "3", "3", "300000000", "fw.5mi"},
		},
		{
			name:  "meter with burst, refund, fixed clock",
			rules: []limit.Rule{{Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 10, Burst: 30}},
			cost:  limit.Cost{N: 7, Refund: true},
			clock: scriptClock{Fixed: true, At: 42},
			head:  []string{"42", "7", "1"},
			want:  []string{"4", "10", "30", "1000000", "me.0"},
		},
		{
			name: "sliding log and sliding window",
			rules: []limit.Rule{
				{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 100},
				{Algorithm: limit.SlidingWindow, Unit: limit.Day, Limit: 1000, Burst: 5}, // burst ignored
			},
			cost: limit.Cost{},
			head: []string{"", "0", "0"},
			want: []string{"2", "100", "100", "3600000000", "sl.1ho", "3", "1000", "1000", "86400000000", "sw.1da"},
		},
		{
			name:  "unknown unit admits only peeks and refunds",
			rules: []limit.Rule{{Unit: limit.UnitUnknown, Limit: 5}},
			cost:  limit.Cost{N: 1},
			head:  []string{"", "1", "0"},
			want:  []string{"0", "5", "5", "0", "fw.1un"},
		},
		{
			name:  "huge cost and limit are clamped below 2^53",
			rules: []limit.Rule{{Unit: limit.Second, Limit: 1 << 60}},
			cost:  limit.Cost{N: 1 << 62},
			head:  []string{"", "9007199254740992", "0"},
			want:  []string{"1", "9007199254740991", "9007199254740991", "1000000", "fw.1se"},
		},
		{
			name:  "calendar day in a zone",
			rules: []limit.Rule{{Unit: limit.Day, Limit: 9, Location: shanghai}},
			cost:  limit.Cost{N: 1},
			clock: scriptClock{At: at},
			head:  []string{"", "1", "0"},
			want: func() []string {
				_, s := calendarSegments(limit.Rule{Unit: limit.Day, Location: shanghai}, at)
				return []string{"5", "9", "9", "86400000000", "fw.1da.Asia/Shanghai", "0",
					fmt.Sprint(s[0]), fmt.Sprint(s[1]), fmt.Sprint(s[2]), fmt.Sprint(s[3])}
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := appendDecideArgs([]any{"evalsha"}, tt.rules, tt.cost, tt.clock)
			if err != nil {
				t.Fatal(err)
			}
			got := wire(args)
			want := slices.Concat([]string{"evalsha"}, tt.head, tt.want)
			if !slices.Equal(got, want) {
				t.Fatalf("ARGV\n got %q\nwant %q", got, want)
			}
			if len(args)-1 > argCount(len(tt.rules)) {
				t.Fatalf("%d slots, argCount says at most %d", len(args)-1, argCount(len(tt.rules)))
			}
			// The prepared path writes the same slots.
			prepared := appendHead([]any{"evalsha"}, tt.cost, tt.clock)
			for _, r := range tt.rules {
				a, err := prepareRule(r)
				if err != nil {
					t.Fatal(err)
				}
				prepared = a.appendTo(prepared, tt.clock)
				if a.ownKey != ownsKey(r) {
					t.Fatalf("%v: ruleArgs.ownKey %v, ownsKey %v", r, a.ownKey, ownsKey(r))
				}
			}
			if p := wire(prepared); !slices.Equal(p, want) {
				t.Fatalf("prepared ARGV\n got %q\nwant %q", p, want)
			}
		})
	}
}

func TestAppendDecideArgsRejects(t *testing.T) {
	for _, r := range []limit.Rule{
		{Algorithm: limit.GCRA + 1, Unit: limit.Second},
		{Algorithm: -1, Unit: limit.Second},
		{Unit: limit.Year + 1},
		{Unit: -1},
	} {
		if _, err := appendDecideArgs(nil, []limit.Rule{{Unit: limit.Second}, r}, limit.Cost{N: 1}, scriptClock{}); err == nil {
			t.Errorf("rule %+v: no error", r)
		}
		if _, err := prepareRule(r); err == nil {
			t.Errorf("prepareRule(%+v): no error", r)
		}
	}
}

// TestPreparedArgsDoNotAllocate: appending a prepared, non-calendar rule
// and the head with a small cost allocates nothing.
func TestPreparedArgsDoNotAllocate(t *testing.T) {
	rules := []limit.Rule{
		{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 10, Burst: 30},
		{Name: "hourly", Algorithm: limit.SlidingWindow, Unit: limit.Hour, Limit: 1000},
		{Name: "daily", Unit: limit.Day, Limit: 10000},
	}
	var prepared []*ruleArgs
	for _, r := range rules {
		a, err := prepareRule(r)
		if err != nil {
			t.Fatal(err)
		}
		prepared = append(prepared, a)
	}
	dst := make([]any, 0, argCount(len(rules)))
	clock := scriptClock{At: 1_900_000_000_000_000}
	allocs := testing.AllocsPerRun(100, func() {
		dst = appendHead(dst[:0], limit.Cost{N: 1}, clock)
		for _, a := range prepared {
			dst = a.appendTo(dst, clock)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per call, want 0", allocs)
	}
}

func TestParseDecideInts(t *testing.T) {
	tests := []struct {
		name    string
		ints    []int64
		n       int
		want    limit.Decision
		wantErr bool
	}{
		{
			name: "two rules, the second binds",
			ints: []int64{1, 1, 1, 9, 1000, 1, 2, 500},
			n:    2,
			want: limit.Decision{Allowed: true, Binding: 1, Outcomes: []limit.Outcome{
				{Allowed: true, Remaining: 9, Reset: time.Millisecond},
				{Allowed: true, Remaining: 2, Reset: 500 * time.Microsecond},
			}},
		},
		{
			name: "one rule admitted: its remaining, its reset",
			ints: []int64{9, 1000},
			n:    1,
			want: limit.Decision{Allowed: true, Binding: 0, Outcomes: []limit.Outcome{
				{Allowed: true, Remaining: 9, Reset: time.Millisecond},
			}},
		},
		{
			name: "one rule admitted, none left",
			ints: []int64{0, 7},
			n:    1,
			want: limit.Decision{Allowed: true, Binding: 0, Outcomes: []limit.Outcome{
				{Allowed: true, Remaining: 0, Reset: 7 * time.Microsecond},
			}},
		},
		{
			name: "one rule denied, none left: -1",
			ints: []int64{-1, 500},
			n:    1,
			want: limit.Decision{Allowed: false, Binding: 0, Outcomes: []limit.Outcome{
				{Allowed: false, Remaining: 0, Reset: 500 * time.Microsecond},
			}},
		},
		{
			name: "one rule denied with 2^53-1 left (a cost above it): exact",
			ints: []int64{-(1 << 53), 500},
			n:    1,
			want: limit.Decision{Allowed: false, Binding: 0, Outcomes: []limit.Outcome{
				{Allowed: false, Remaining: 1<<53 - 1, Reset: 500 * time.Microsecond},
			}},
		},
		{name: "one rule in the long form", ints: []int64{1, 0, 1, 9, 5}, n: 1, wantErr: true},
		{name: "one rule, too short", ints: []int64{9}, n: 1, wantErr: true},
		{name: "one rule, negative reset", ints: []int64{9, -1}, n: 1, wantErr: true},
		{name: "one rule, the failed marker", ints: []int64{itemFailed, 5}, n: 1, wantErr: true},
		{name: "too short", ints: []int64{1, 0, 1, 9, 5, 1, 2}, n: 2, wantErr: true},
		{name: "negative remaining", ints: []int64{1, 0, 1, -1, 5, 1, 2, 5}, n: 2, wantErr: true},
		{name: "binding disagrees with Bind", ints: []int64{1, 0, 1, 9, 1000, 1, 2, 500}, n: 2, wantErr: true}, // rule 1 has less left
		{name: "allowed disagrees with Bind", ints: []int64{0, 1, 1, 3, 5, 1, 2, 5}, n: 2, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDecideInts(tt.ints, make([]limit.Outcome, tt.n))
			if tt.wantErr {
				if !errors.Is(err, errReply) {
					t.Fatalf("err %v, want errReply", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Allowed != tt.want.Allowed || got.Binding != tt.want.Binding || !slices.Equal(got.Outcomes, tt.want.Outcomes) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			// parseDecideReply agrees on the boxed form of the same reply.
			boxed := make([]any, len(tt.ints))
			for i, v := range tt.ints {
				boxed[i] = v
			}
			again, err := parseDecideReply(boxed, tt.n)
			if err != nil || again.Binding != got.Binding || !slices.Equal(again.Outcomes, got.Outcomes) {
				t.Fatalf("parseDecideReply: %+v, %v", again, err)
			}
		})
	}
}
