package service

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// overrideFuzzYAML limits k to 5 a minute with a sliding log, whose state
// no override (always a fixed window) can share or trim, so k counts
// exactly whatever overrides come between; j's fixed window of a second
// shares its state with overrides of a second and competes with the others
// for the bounded room beside them.
const overrideFuzzYAML = `
domain: o
descriptors:
  - key: k
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 5}
  - key: j
    rate_limit: {unit: second, requests_per_unit: 2}
`

// overrideUnitSeconds is the length of each valid override unit (Envoy's
// enum: SECOND 1 .. YEAR 6, WEEK 7); a month is 30 days, a year 365.
var overrideUnitSeconds = map[typev3.RateLimitUnit]int64{
	1: 1, 2: 60, 3: 3600, 4: 86400, 5: 30 * 86400, 6: 365 * 86400, 7: 7 * 86400,
}

// oneYear is the longest period an override is decided with, in seconds
// (MaxOverridePeriod): a longer one is decided as per YEAR.
const oneYear = 365 * 86400

// overrideValid reports whether a service decides o (a known unit) rather
// than answering it OVER_LIMIT on its own.
func overrideValid(o *rlv3.RateLimitDescriptor_RateLimitOverride) bool {
	_, ok := overrideUnitSeconds[o.Unit]
	return ok
}

// u32 reads a uint32 from a byte and a shift.
func (r *fuzzReader) u32() uint32 { return uint32(r.byte()) << (r.byte() % 32) }

// override builds an arbitrary limit override: any unit enum value (mostly
// near the valid ones), any requests_per_unit and unit_multiplier.
func (r *fuzzReader) override() *rlv3.RateLimitDescriptor_RateLimitOverride {
	o := &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: r.u32()}
	switch u := r.byte(); {
	case u < 240:
		o.Unit = typev3.RateLimitUnit(int32(u%10) - 1)
	default:
		o.Unit = typev3.RateLimitUnit(int32(r.u32()))
	}
	switch r.byte() % 4 {
	case 1:
		o.UnitMultiplier = wrapperspb.UInt32(0)
	case 2:
		o.UnitMultiplier = wrapperspb.UInt32(uint32(r.byte()%40) + 1)
	case 3:
		o.UnitMultiplier = wrapperspb.UInt32(r.u32())
	}
	return o
}

// overrideRequest builds a request of one to five descriptors on k or j,
// each with an override (or, now and then, null), with any hits_addend
// and is_negative_hits; now and then a whole-request fault.
func (r *fuzzReader) overrideRequest() *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "o"}
	if r.byte()%2 == 1 {
		req.HitsAddend = r.u32()
	}
	n := int(r.byte()%5) + 1 // 5 is one over the bound: InvalidArgument
	for range n {
		flags := r.byte()
		if flags == 255 {
			req.Descriptors = append(req.Descriptors, nil)
			continue
		}
		key := "k"
		if flags&1 != 0 {
			key = "j"
		}
		x := d(key, "v")
		x.Limit = r.override()
		x.IsNegativeHits = flags&2 != 0
		if flags&4 != 0 {
			x.HitsAddend = wrapperspb.UInt64(uint64(r.byte()) << (r.byte() % 64))
		}
		req.Descriptors = append(req.Descriptors, x)
	}
	switch r.byte() {
	case 250:
		req.Domain = ""
	case 251:
		req.Domain = "oversized-domain"
	case 252:
		return nil
	}
	return req
}

// wantCurrentLimit is what a decided override is echoed as: the response
// leaves unit_multiplier out when it is 1, unset or 0, and a period longer
// than a year is decided, and echoed, as per YEAR.
func wantCurrentLimit(o *rlv3.RateLimitDescriptor_RateLimitOverride) (uint32, rlsv3.RateLimitResponse_RateLimit_Unit, uint32) {
	m := o.GetUnitMultiplier().GetValue()
	if int64(m) > oneYear/overrideUnitSeconds[o.Unit] {
		return o.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_YEAR, 0
	}
	if m <= 1 {
		m = 0
	}
	return o.RequestsPerUnit, rlsv3.RateLimitResponse_RateLimit_Unit(o.Unit), m
}

// checkOverrideResponse checks one override request's outcome.
func checkOverrideResponse(t *testing.T, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, err error) {
	t.Helper()
	whole := req == nil || req.Domain == "" || len(req.Domain) > 8 || len(req.Descriptors) > 4
	if whole {
		if st, ok := status.FromError(err); err == nil || !ok || st.Code() != codes.InvalidArgument || resp != nil {
			t.Fatalf("request %v: got (%v, %v), want InvalidArgument", req, resp, err)
		}
		return
	}
	if err != nil || resp == nil || len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("request %v: got (%v, %v), want one status per descriptor", req, resp, err)
	}
	for i, x := range req.Descriptors {
		st := resp.Statuses[i]
		if st == nil || (st.Code != OK && st.Code != OVER) {
			t.Fatalf("request %v: status %d is %v", req, i, st)
		}
		if x == nil || !overrideValid(x.Limit) {
			if st.Code != OVER || st.CurrentLimit != nil || st.LimitRemaining != 0 {
				t.Fatalf("request %v: malformed descriptor %d answered %s, want OVER_LIMIT alone", req, i, statusString(st))
			}
			if resp.OverallCode != OVER {
				t.Fatalf("request %v: a malformed descriptor left the overall code %s", req, resp.OverallCode)
			}
			continue
		}
		rpu, unit, mult := wantCurrentLimit(x.Limit)
		cl := st.CurrentLimit
		if cl == nil || cl.RequestsPerUnit != rpu || cl.Unit != unit || cl.UnitMultiplier.GetValue() != mult ||
			(mult == 0) != (cl.UnitMultiplier == nil) {
			t.Fatalf("request %v: descriptor %d echoed %s, want %d/%dx%s", req, i, statusString(st), rpu, mult, unit)
		}
		if st.LimitRemaining > rpu {
			t.Fatalf("request %v: descriptor %d remaining %d over its limit %d", req, i, st.LimitRemaining, rpu)
		}
	}
}

// FuzzLimitOverrides sends arbitrary `limit` overrides on two configured
// descriptors, interleaved with ordinary requests on the same ones. Every
// request is answered (InvalidArgument only when malformed as a whole, else
// one status per descriptor); an override with an unknown unit is answered
// OVER_LIMIT on its own; a decided override echoes the limit sent, or per
// YEAR when its period is longer than a year; and k's own rule, 5 a minute, admits exactly 5 in
// a minute whatever overrides on k came between, so no override reaches,
// resets or crowds out its state.
func FuzzLimitOverrides(f *testing.F) {
	// The layout is the readers': an operation byte (even: ordinary k;
	// odd: an override request), then for an override request its bytes
	// (addend flag, count-1, per descriptor flags, requests_per_unit and
	// shift, unit, multiplier kind and value; a fault byte), then a step.
	f.Add([]byte{})
	// Ordinary k six times: five admitted, the sixth denied.
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	// k with an unknown unit (UNKNOWN), then 3 per 3 weeks, then ordinary k.
	f.Add([]byte{1, 0, 0, 0, 3, 0, 1, 0, 0, 0, 1, 0, 0, 0, 3, 0, 8, 2, 2, 0, 0, 0, 0})
	// j per 1000 years (decided per year) with a huge hits_addend beside k per 20
	// years, a request addend of 255<<20; then ordinary k.
	f.Add([]byte{1, 1, 255, 20, 1, 5, 5, 0, 7, 3, 250, 2, 255, 63, 0, 1, 0, 7, 2, 99, 0, 0, 0, 0})
	// Requests malformed as a whole (5 descriptors, empty domain, null
	// request), then a null descriptor beside j per second, then ordinary k.
	f.Add([]byte{1, 0, 4, 255, 255, 255, 255, 255, 0, 0, 1, 0, 0, 0, 1, 0, 2, 0, 250, 0,
		1, 0, 0, 0, 1, 0, 2, 0, 252, 0, 1, 0, 1, 255, 1, 1, 0, 2, 0, 0, 0, 0, 0})
	// Twenty overrides of 1 per n seconds (n = 1..20) on k and j, refunds
	// among them, between ordinary k requests; then a minute later six more.
	f.Add([]byte{
		1, 0, 3, 0, 1, 0, 2, 2, 0, 1, 1, 0, 2, 2, 1, 2, 1, 0, 2, 2, 2, 3, 1, 0, 2, 2, 3, 0, 3, 0, 3,
		1, 0, 3, 0, 1, 0, 2, 2, 4, 1, 1, 0, 2, 2, 5, 2, 1, 0, 2, 2, 6, 3, 1, 0, 2, 2, 7, 0, 3, 0, 3,
		1, 0, 3, 0, 1, 0, 2, 2, 8, 1, 1, 0, 2, 2, 9, 2, 1, 0, 2, 2, 10, 3, 1, 0, 2, 2, 11, 0, 3, 0, 3,
		1, 0, 3, 0, 1, 0, 2, 2, 12, 1, 1, 0, 2, 2, 13, 2, 1, 0, 2, 2, 14, 3, 1, 0, 2, 2, 15, 0, 3, 0, 3,
		1, 0, 3, 0, 1, 0, 2, 2, 16, 1, 1, 0, 2, 2, 17, 2, 1, 0, 2, 2, 18, 3, 1, 0, 2, 2, 19, 0, 3, 0, 3,
		0, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t, Options{Bounds: RequestBounds{MaxDescriptors: 4, MaxEntries: 2, MaxEntryLen: 8}}, overrideFuzzYAML)
		r := &fuzzReader{b: data}
		ctx := context.Background()
		admitted := 0               // ordinary k hits admitted since phaseStart
		phaseStart := h.clock.Now() // all of them lie within a minute of it
		for range 32 {
			if r.byte()%2 == 0 {
				resp, err := h.svc.ShouldRateLimit(ctx, rq("o", d("k", "v")))
				if err != nil || len(resp.GetStatuses()) != 1 {
					t.Fatalf("ordinary k: (%v, %v)", resp, err)
				}
				st := resp.Statuses[0]
				want := OK
				if admitted >= 5 {
					want = OVER
				}
				if st.Code != want {
					t.Fatalf("ordinary k after %d admitted this minute: %s, want %s", admitted, statusString(st), want)
				}
				if st.Code == OK {
					admitted++
				}
			} else {
				req := r.overrideRequest()
				resp, err := h.svc.ShouldRateLimit(ctx, req)
				checkOverrideResponse(t, req, resp, err)
			}
			// Time moves in steps under 2.55 s, or jumps past k's minute
			// (at the latest 50 s into one), so every hit admitted since
			// phaseStart is still in k's sliding log and earlier ones are
			// gone: the model stays exact.
			switch step := r.byte(); {
			case step == 255 || h.clock.Now().Sub(phaseStart) > 50*time.Second:
				h.clock.Advance(61 * time.Second)
				admitted, phaseStart = 0, h.clock.Now()
			default:
				h.clock.Advance(time.Duration(step) * 10 * time.Millisecond)
			}
		}
	})
}
