package service

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/limit"
)

func failureYAML(mode string) string {
	return `
domain: fm
failure_mode: ` + mode + `
descriptors:
  - key: k
    rate_limits:
      - {name: first, unit: minute, requests_per_unit: 4}
      - {name: second, unit: hour, requests_per_unit: 100}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: u
    rate_limit: {unlimited: true}
`
}

// shortBackend breaks the Backend contract on purpose: it answers fewer
// results than checks.
type shortBackend struct{ stacktest.FailingBackend }

func (shortBackend) Decide(context.Context, []backend.Check) []backend.Result { return nil }

// panickyBackend panics on purpose, to prove the handler recovers.
type panickyBackend struct{ stacktest.FailingBackend }

func (panickyBackend) Decide(context.Context, []backend.Check) []backend.Result { panic("boom") }

// memLocal marks where TestFailureModes builds a real memory backend as
// Local (it needs the test's clock).
type useMemory struct{ stacktest.FailingBackend }

var memLocal backend.Backend = useMemory{}

func TestFailureModes(t *testing.T) {
	type call struct {
		code  codes.Code
		want  []string // statuses when code is OK
		match string   // substring of the error message otherwise
	}
	tests := []struct {
		name      string
		mode      string
		backend   backend.Backend // default: failing with stacktest.ErrRedisDown
		local     backend.Backend // nil: none; memLocal: a memory backend
		instances int
		keys      []string
		calls     []call
	}{
		{name: "error (default)", mode: "error", keys: []string{"k"},
			calls: []call{{code: codes.Unavailable, match: `rate limit domain "fm": backend could not decide: redis 127.0.0.1:1: connection refused`}}},
		{name: "error does not touch unlimited", mode: "error", keys: []string{"u"},
			calls: []call{{want: []string{"OK rem=4294967295"}}}},
		{name: "allow", mode: "allow", keys: []string{"k", "u"},
			calls: []call{{want: []string{"OK first:4/MINUTE rem=0", "OK rem=4294967295"}}}},
		{name: "deny", mode: "deny", keys: []string{"k"},
			calls: []call{{want: []string{"OVER_LIMIT first:4/MINUTE rem=0"}}}},
		{name: "deny under shadow_mode", mode: "deny", keys: []string{"s"},
			calls: []call{{want: []string{"OK 4/MINUTE rem=0"}}}},
		{name: "local, limits divided by 2", mode: "local", local: memLocal, instances: 2, keys: []string{"k"},
			calls: []call{
				{want: []string{"OK first:4/MINUTE rem=1 reset=1m0s"}},
				{want: []string{"OK first:4/MINUTE rem=0 reset=1m0s"}},
				{want: []string{"OVER_LIMIT first:4/MINUTE rem=0 reset=1m0s"}},
			}},
		{name: "local without a local backend is error", mode: "local", keys: []string{"k"},
			calls: []call{{code: codes.Unavailable, match: "connection refused"}}},
		{name: "local backend failing too", mode: "local", local: stacktest.FailingBackend{Err: stacktest.ErrRedisDown}, keys: []string{"k"},
			calls: []call{{code: codes.Unavailable, match: "local fallback"}}},
		{name: "caller canceled", mode: "error", backend: stacktest.FailingBackend{Err: fmt.Errorf("evalsha: %w", context.Canceled)}, keys: []string{"k"},
			calls: []call{{code: codes.Canceled, match: "context canceled"}}},
		{name: "backend answers too few results", mode: "error", backend: shortBackend{}, keys: []string{"k"},
			calls: []call{{code: codes.Unavailable, match: "0 results for 1 checks"}}},
		{name: "backend panics", mode: "allow", backend: panickyBackend{}, keys: []string{"k"},
			calls: []call{{code: codes.Internal, match: "internal error"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Backend: tt.backend, Local: tt.local, LocalInstances: tt.instances}
			if opts.Backend == nil {
				opts.Backend = stacktest.FailingBackend{Err: stacktest.ErrRedisDown}
			}
			if _, ok := opts.Local.(useMemory); ok {
				opts.Local = stacktest.Memory(t, memory.Options{Now: testenv.NewClock(t0).Now})
			}
			h := newHarness(t, opts, failureYAML(tt.mode))
			for i, c := range tt.calls {
				var ds []*rlv3.RateLimitDescriptor
				for _, k := range tt.keys {
					ds = append(ds, d(k, "1"))
				}
				resp, err := h.svc.ShouldRateLimit(context.Background(), rq("fm", ds...))
				if status.Code(err) != c.code {
					t.Fatalf("call %d: error %v, want code %s", i, err, c.code)
				}
				if err != nil {
					if !strings.Contains(err.Error(), c.match) {
						t.Fatalf("call %d: error %q does not contain %q", i, err, c.match)
					}
					if resp != nil {
						t.Fatalf("call %d: response %v with an error", i, resp)
					}
					continue
				}
				wantOverall := OK
				if strings.HasPrefix(c.want[0], "OVER") {
					wantOverall = OVER
				}
				expect(t, resp, wantOverall, c.want...)
			}
		})
	}
}

func TestLocalRules(t *testing.T) {
	rules := []limit.Rule{
		{Limit: 4}, {Limit: 1}, {Limit: 0}, {Limit: 10, Burst: 7, Algorithm: limit.TokenBucket}, {Limit: 9},
	}
	tests := []struct {
		instances int
		want      []limit.Rule
	}{
		{0, rules},
		{1, rules},
		{3, []limit.Rule{{Limit: 2}, {Limit: 1}, {Limit: 0}, {Limit: 4, Burst: 3, Algorithm: limit.TokenBucket}, {Limit: 3}}},
		{100, []limit.Rule{{Limit: 1}, {Limit: 1}, {Limit: 0}, {Limit: 1, Burst: 1, Algorithm: limit.TokenBucket}, {Limit: 1}}},
	}
	for _, tt := range tests {
		s := New(Options{LocalInstances: tt.instances})
		got := s.localRules(rules)
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("instances %d rule %d: got %+v, want %+v", tt.instances, i, got[i], tt.want[i])
			}
		}
		if rules[0].Limit != 4 {
			t.Fatal("localRules modified the config's rules")
		}
	}
}
