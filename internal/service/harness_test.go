package service

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// t0 is the fake clock's start: 250 ms into an hour (and into a minute and
// a second), so fixed-window resets are exact to the millisecond.
var t0 = time.Date(2027, 1, 4, 10, 0, 0, int(250*time.Millisecond), time.UTC)

// countingBackend passes every call to a real backend and counts Decide
// calls and the checks they carried.
type countingBackend struct {
	backend.Backend
	calls, checks atomic.Int64
}

func (b *countingBackend) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	b.calls.Add(1)
	b.checks.Add(int64(len(checks)))
	return b.Backend.Decide(ctx, checks)
}

// harness is a Service on a real memory backend with a fake clock and a
// config parsed from YAML.
type harness struct {
	svc   *Service
	clock *testenv.Clock
	mem   *countingBackend
}

// newHarness parses the YAML documents (one file each) into a config and
// builds a Service. opts.Backend defaults to the memory backend.
func newHarness(t testing.TB, opts Options, yamls ...string) *harness {
	t.Helper()
	h := &harness{clock: testenv.NewClock(t0)}
	h.mem = &countingBackend{Backend: stacktest.Memory(t, memory.Options{Now: h.clock.Now})}
	if opts.Backend == nil {
		opts.Backend = h.mem
	}
	if opts.Logger == nil {
		opts.Logger = stacktest.QuietLogger()
	}
	h.svc = New(opts)
	h.svc.SetConfig(parseConfig(t, yamls...))
	return h
}

// parseConfig builds a config from YAML documents, one file each.
func parseConfig(t testing.TB, yamls ...string) *descriptor.Config {
	t.Helper()
	return stacktest.ParseConfig(t, yamls...)
}

// call runs one request that must succeed.
func (h *harness) call(t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := h.svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// rq builds a request.
func rq(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return stacktest.Request(domain, ds...)
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) *rlv3.RateLimitDescriptor { return stacktest.Descriptor(kv...) }

// addend sets the descriptor's hits_addend.
func addend(x *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	return stacktest.WithAddend(x, n)
}

// refund marks the descriptor is_negative_hits.
func refund(x *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	x.IsNegativeHits = true
	return x
}

// override sets the descriptor's limit override; mult 0 leaves
// unit_multiplier unset.
func override(x *rlv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit, mult uint32) *rlv3.RateLimitDescriptor {
	x.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult != 0 {
		x.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return x
}

// statusString renders a status compactly:
// "CODE [name:]rpu/[mult×]UNIT rem=N [reset=D]".
func statusString(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	var b strings.Builder
	b.WriteString(st.GetCode().String())
	if cl := st.GetCurrentLimit(); cl != nil {
		b.WriteByte(' ')
		if cl.Name != "" {
			b.WriteString(cl.Name + ":")
		}
		fmt.Fprintf(&b, "%d/", cl.RequestsPerUnit)
		if cl.UnitMultiplier != nil {
			fmt.Fprintf(&b, "%dx", cl.UnitMultiplier.Value)
		}
		b.WriteString(cl.Unit.String())
	}
	fmt.Fprintf(&b, " rem=%d", st.GetLimitRemaining())
	if r := st.GetDurationUntilReset(); r != nil {
		fmt.Fprintf(&b, " reset=%s", r.AsDuration())
	}
	return b.String()
}

// statuses renders every status of resp.
func statuses(resp *rlsv3.RateLimitResponse) []string {
	out := make([]string, len(resp.GetStatuses()))
	for i, st := range resp.GetStatuses() {
		out[i] = statusString(st)
	}
	return out
}

// expect checks the overall code and the rendered statuses.
func expect(t testing.TB, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, want ...string) {
	t.Helper()
	got := statuses(resp)
	if resp.GetOverallCode() != overall || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got overall %s, statuses\n  %s\nwant overall %s, statuses\n  %s",
			resp.GetOverallCode(), strings.Join(got, "\n  "), overall, strings.Join(want, "\n  "))
	}
}

// headerMap returns the response headers as a map (and fails on repeats).
func headerMap(t testing.TB, resp *rlsv3.RateLimitResponse) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if _, dup := m[h.Key]; dup {
			t.Fatalf("header %s added twice", h.Key)
		}
		m[h.Key] = h.Value
	}
	return m
}

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)
