package redis

import (
	"errors"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// testBreakers returns the breakers of a cluster (or not) on clock.
func testBreakers(cluster bool, failures int, openFor time.Duration, clock *testenv.Clock) *breakers {
	o := Options{Breaker: BreakerOptions{Failures: failures, OpenFor: openFor}, Clock: clock.Now}
	return newBreakers(o, logrus.NewEntry(quietLogger()), cluster)
}

// step is one event in a breaker scenario: advance the clock, then ask the
// breaker of node whether a call may go (want), and if it may, report the
// call's verdict.
type step struct {
	advance time.Duration
	node    string
	want    string // "pass", "probe" or "open"
	verdict verdict
}

// TestBreakers drives per-node breakers through scenarios on a fake
// clock: failures of one node open its breaker only; the open period, the
// single probe, and what its verdict does; neutral verdicts; a disabled
// breaker.
func TestBreakers(t *testing.T) {
	const a, b = "10.0.0.1:6379", "10.0.0.2:6379"
	tests := []struct {
		name     string
		failures int
		steps    []step
		open     map[string]bool // at the end
	}{
		{
			name:     "one node's failures open its breaker, not the others'",
			failures: 3,
			steps: []step{
				{node: a, want: "pass", verdict: failed},
				{node: b, want: "pass", verdict: healthy},
				{node: a, want: "pass", verdict: failed},
				{node: b, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: failed}, // third in a row: a opens
				{node: a, want: "open"},
				{node: b, want: "pass", verdict: healthy},
				{node: b, want: "pass", verdict: failed},
				{node: a, want: "open"},
			},
			open: map[string]bool{a: true, b: false},
		},
		{
			name:     "a success resets the count",
			failures: 2,
			steps: []step{
				{node: a, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: healthy},
				{node: a, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: healthy},
			},
			open: map[string]bool{a: false},
		},
		{
			name:     "after the open period one probe; its failure opens it again",
			failures: 1,
			steps: []step{
				{node: a, want: "pass", verdict: failed},
				{advance: 249 * time.Millisecond, node: a, want: "open"},
				{advance: time.Millisecond, node: a, want: "probe", verdict: failed},
				{node: a, want: "open"},
				{advance: 249 * time.Millisecond, node: a, want: "open"},
				{advance: time.Millisecond, node: a, want: "probe", verdict: healthy},
				{node: a, want: "pass", verdict: healthy},
			},
			open: map[string]bool{a: false},
		},
		{
			name:     "a probe whose caller left lets the next call probe",
			failures: 1,
			steps: []step{
				{node: a, want: "pass", verdict: failed},
				{advance: time.Second, node: a, want: "probe", verdict: neutral},
				{node: a, want: "probe", verdict: failed},
				{node: a, want: "open"},
			},
			open: map[string]bool{a: true},
		},
		{
			name:     "callers that left count for nothing",
			failures: 2,
			steps: []step{
				{node: a, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: neutral},
				{node: a, want: "pass", verdict: neutral},
				{node: b, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: failed},
				{node: a, want: "open"},
			},
			open: map[string]bool{a: true, b: false},
		},
		{
			name:     "disabled: never opens",
			failures: -1,
			steps: []step{
				{node: a, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: failed},
				{node: a, want: "pass", verdict: failed},
			},
			open: map[string]bool{a: false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
			s := testBreakers(true, tt.failures, 250*time.Millisecond, clock)
			for i, st := range tt.steps {
				clock.Advance(st.advance)
				br := s.get(st.node)
				ok, probe := br.allow()
				got := "open"
				switch {
				case ok && probe:
					got = "probe"
				case ok:
					got = "pass"
				}
				if got != st.want {
					t.Fatalf("step %d (%s): %s, want %s", i, st.node, got, st.want)
				}
				if ok {
					br.done(st.verdict, probe)
				}
			}
			for node, want := range tt.open {
				if got := s.isOpen(node); got != want {
					t.Errorf("node %s open %v, want %v", node, got, want)
				}
			}
		})
	}
}

// TestBreakerProbeIsSingle: while a probe is in flight, the other calls
// to that node still fail fast, and the other nodes are not affected.
func TestBreakerProbeIsSingle(t *testing.T) {
	clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	s := testBreakers(true, 1, time.Second, clock)
	a, other := s.get("a:1"), s.get("b:1")
	a.allow()
	a.done(failed, false)
	clock.Advance(time.Second)
	ok, probe := a.allow()
	if !ok || !probe {
		t.Fatalf("after the open period: ok %v probe %v, want a probe", ok, probe)
	}
	for range 3 {
		if ok, _ := a.allow(); ok {
			t.Fatal("a second call went through while the probe was in flight")
		}
		if ok, probe := other.allow(); !ok || probe {
			t.Fatalf("another node: ok %v probe %v, want a plain pass", ok, probe)
		}
	}
	a.done(healthy, true)
	if ok, probe := a.allow(); !ok || probe {
		t.Fatalf("after a good probe: ok %v probe %v, want a plain pass", ok, probe)
	}
}

// TestBreakersByAddress: breakers are made on first use of an address and
// kept; without a cluster, and with the breaker disabled, there is one for
// every address; the error of a fast failure is ErrCircuitOpen and
// ErrUnavailable, and names the node.
func TestBreakersByAddress(t *testing.T) {
	clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	tests := []struct {
		name     string
		cluster  bool
		failures int
		shared   bool   // one breaker for every address
		msg      string // in the error of "10.0.0.1:6379"
	}{
		{"cluster", true, 5, false, "redis node 10.0.0.1:6379: circuit open after 5 consecutive failed round trips"},
		{"single", false, 5, true, "redis: circuit open after 5 consecutive failed round trips"},
		{"cluster, disabled", true, -1, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testBreakers(tt.cluster, tt.failures, time.Second, clock)
			x, y := s.get("10.0.0.1:6379"), s.get("10.0.0.2:6379")
			if x != s.get("10.0.0.1:6379") {
				t.Error("a second get made a new breaker for the same address")
			}
			if (x == y) != tt.shared {
				t.Errorf("breakers of two addresses shared: %v, want %v", x == y, tt.shared)
			}
			if s.isOpen("10.0.0.3:6379") {
				t.Error("an address never used has an open breaker")
			}
			if want := map[bool]int{true: 0, false: 2}[tt.shared]; s.len() != want {
				t.Errorf("%d breakers by address after using 2 and asking about a third, want %d", s.len(), want)
			}
			if tt.msg == "" {
				return
			}
			if !errors.Is(x.err, backend.ErrCircuitOpen) || !errors.Is(x.err, backend.ErrUnavailable) {
				t.Errorf("error %v is not both ErrCircuitOpen and ErrUnavailable", x.err)
			}
			if !strings.Contains(x.err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", x.err, tt.msg)
			}
		})
	}
	s := testBreakers(true, 5, time.Second, clock)
	if msg := s.get("").err.Error(); !strings.Contains(msg, "no slot map") {
		t.Errorf("the unknown node's error %q does not say the slot map is unknown", msg)
	}
}

// TestBreakersPruned: addresses come and go with failovers; the breakers of
// idle nodes are dropped once there are many, those of failing nodes kept,
// so the map stays bounded and nothing a breaker knows is lost.
func TestBreakersPruned(t *testing.T) {
	clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	s := testBreakers(true, 2, time.Second, clock)
	failing := s.get("failing:1")
	failing.allow()
	failing.done(failed, false) // one failure counted: not idle
	dead := s.get("dead:1")
	for range 2 {
		dead.allow()
		dead.done(failed, false) // open
	}
	for i := range 1000 {
		br := s.get(fmt.Sprintf("10.0.%d.%d:6379", i/256, i%256))
		br.allow()
		br.done(healthy, false)
		if n := s.len(); n > minPruneAt {
			t.Fatalf("%d breakers after %d addresses, want at most %d", n, i+3, minPruneAt)
		}
	}
	if s.get("failing:1") != failing || s.get("dead:1") != dead {
		t.Fatal("a breaker that knew of failures was pruned")
	}
	if !s.isOpen("dead:1") {
		t.Fatal("the open breaker was pruned or closed")
	}
	// A pruned address gets a fresh breaker, alike.
	br := s.get("10.0.0.0:6379")
	if ok, probe := br.allow(); !ok || probe {
		t.Fatalf("a pruned address's new breaker: ok %v probe %v", ok, probe)
	}
}
