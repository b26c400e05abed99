package service

import (
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// view is what one status reports, before it becomes a proto.
type view struct {
	rule      *limit.Rule // current_limit; nil for none
	remaining uint32
	reset     time.Duration // rounded up to the millisecond
	hasReset  bool
}

// viewOf computes what item it reports and sets it.over and it.shadowed.
func viewOf(it *item) view {
	switch it.kind {
	case kindUnlimited:
		return view{remaining: math.MaxUint32}
	case kindInvalid:
		it.over = true // limits, never frees: see invalidDescriptor
		return view{}
	case kindCheck:
	default:
		return view{}
	}
	var v view
	denied := false
	switch it.failed {
	case failedOpen, failedShut:
		v.rule = &it.rules[0]
		denied = it.failed == failedShut
	default:
		b := it.dec.Binding
		if b < 0 || b >= len(it.rules) {
			return view{} // a backend answered without rules: no limit
		}
		o := it.dec.Outcomes[b]
		v = view{rule: &it.rules[b], remaining: clamp32(o.Remaining), reset: ceilMillis(o.Reset), hasReset: true}
		denied = !it.dec.Allowed
	}
	if denied {
		if it.shadow {
			it.shadowed = true
		} else {
			it.over = true
		}
	}
	return v
}

// ceilMillis rounds d up to the next millisecond (negative becomes 0).
func ceilMillis(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// respond builds the response from the decided items. It reports whether
// the global shadow mode turned OVER_LIMIT into OK.
func (s *Service) respond(req *rlsv3.RateLimitRequest, w *work) (*rlsv3.RateLimitResponse, bool) {
	n := len(w.items)
	resp, blocks := allocResponse(n)
	views := w.views(n)
	nonQuotaOver, quotas, quotasOver := false, 0, 0
	for i := range w.items {
		it := &w.items[i]
		v := viewOf(it)
		views[i] = v
		blk := &blocks[i]
		st := &blk.status
		resp.Statuses[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		if it.over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		st.LimitRemaining = v.remaining
		if v.rule != nil {
			cl := &blk.limit
			cl.Name = v.rule.Name
			cl.RequestsPerUnit = clamp32(v.rule.Limit)
			cl.Unit = unitToEnvoy(v.rule.Unit)
			if v.rule.Multiplier > 1 {
				cl.UnitMultiplier = wrapperspb.UInt32(v.rule.Multiplier)
			}
			st.CurrentLimit = cl
		}
		if v.hasReset {
			d := &blk.reset
			if s.opts.ResetMillis {
				d.Seconds, d.Nanos = int64(v.reset/time.Second), int32(v.reset%time.Second)
			} else {
				// Whole seconds, rounded up, as the incumbent sends: Envoy's
				// x-ratelimit-reset is the seconds field, fraction dropped.
				d.Seconds = ceilSeconds(v.reset)
			}
			st.DurationUntilReset = d
		}
		if it.kind == kindUnlimited {
			continue // the reference leaves unlimited descriptors out of the overall code
		}
		if it.quota {
			quotas++
			if it.over {
				quotasOver++
			}
		} else if it.over {
			nonQuotaOver = true
		}
	}
	over := nonQuotaOver || (quotas > 0 && quotasOver == quotas)
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.Headers.Enabled {
		resp.ResponseHeadersToAdd = s.headers(w, views, over && !s.opts.ShadowMode)
	}
	if s.opts.Headers.Request {
		resp.RequestHeadersToAdd = s.requestHeaders(w, views)
	}
	shadowForced := false
	if over && s.opts.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		shadowForced = true
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = s.dynamicMetadata(req, w)
	}
	return resp, shadowForced
}

// statusBlock holds the messages of one status, so that a response costs
// a fixed number of allocations whatever its number of descriptors.
type statusBlock struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// single is a whole one-descriptor response in one allocation: the common
// case (one rate_limit action per route).
type single struct {
	resp  rlsv3.RateLimitResponse
	ptrs  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	block [1]statusBlock
}

// allocResponse returns an empty response whose Statuses has n entries, and
// the blocks to fill them from.
func allocResponse(n int) (*rlsv3.RateLimitResponse, []statusBlock) {
	if n == 1 {
		s := new(single)
		s.resp.Statuses = s.ptrs[:]
		return &s.resp, s.block[:]
	}
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	return resp, make([]statusBlock, n)
}

// views returns w's view scratch space, sized n.
func (w *work) views(n int) []view {
	if cap(w.viewBuf) < n {
		w.viewBuf = make([]view, n)
	}
	w.viewBuf = w.viewBuf[:n]
	return w.viewBuf
}
