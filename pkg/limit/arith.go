package limit

import "math"

// This file holds the small arithmetic helpers every algorithm shares. The
// Lua scripts in pkg/scripts mirror them; keep them simple and keep the
// order of floating-point operations explicit (see docs/algorithms.md,
// "Arithmetic").

// floorMod returns a mod b in [0, b) for b > 0, also for negative a.
func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// floorDiv returns floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	return (a - floorMod(a, b)) / b
}

// twoTo64 is 2^64 as a float64: the first float64 a uint64 cannot hold.
const twoTo64 = 18446744073709551616.0

// floorCount returns floor(x) as a count: 0 for x ≤ 0 (and NaN), the
// largest uint64 when x does not fit. Lua: math.floor(x), clamped ≥ 0.
func floorCount(x float64) uint64 {
	if !(x > 0) {
		return 0
	}
	if x >= twoTo64 {
		return math.MaxUint64
	}
	return uint64(x) // truncation is floor for x > 0
}

// ceilMicros returns ceil(x) as whole µs, capped at MaxWaitMicros; 0 for
// x ≤ 0 (and NaN). Lua: math.ceil(x), clamped to [0, 2^53].
func ceilMicros(x float64) int64 {
	if !(x > 0) {
		return 0
	}
	if x >= float64(MaxWaitMicros) {
		return MaxWaitMicros
	}
	return int64(math.Ceil(x))
}

// settleSteps bounds how far settle moves a candidate instant. A candidate
// computed in float64 is off by at most a few µs at the boundary.
const settleSteps = 4

// settle returns the earliest instant after floor at which ok holds,
// starting from the candidate t computed by a closed formula. ok must be
// monotone in time (false, ..., false, true, ...). settle moves t forward
// while ok(t) is false and backward while ok(t-1) is still true, at most
// settleSteps µs each way, so the float64 rounding of the formula can never
// make a client that waits exactly the reported time be denied, nor make it
// wait a µs longer than needed.
//
// Lua mirror:
//
//	if t <= floor then t = floor + 1 end
//	for i = 1, 4 do if ok(t) then break end t = t + 1 end
//	for i = 1, 4 do if t - 1 <= floor or not ok(t - 1) then break end t = t - 1 end
func settle(t, floor Micros, ok func(Micros) bool) Micros {
	if t <= floor {
		t = floor + 1
	}
	for i := 0; i < settleSteps && !ok(t); i++ {
		t++
	}
	for i := 0; i < settleSteps && t-1 > floor && ok(t-1); i++ {
		t--
	}
	return t
}

// addCost returns a + b, saturating at the largest uint64.
func addCost(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// subCost returns a - b, or 0 when b ≥ a.
func subCost(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

// fits reports whether used + n ≤ limit without overflowing.
func fits(used, n, limit uint64) bool {
	return n <= limit && used <= limit-n
}

// MaxCharge is the most a window count or a sliding log's total can reach
// through charged costs (Cost.Charge): 2^53, the largest integer every
// backend holds exactly (a Lua number is a float64). A charge that would
// pass it stops at it; no limit is anywhere near it. Lua: math.min(c + n,
// 2^53), which is exact for c, n ≤ 2^53.
const MaxCharge uint64 = 1 << 53

// chargeCount returns count + n capped at MaxCharge.
func chargeCount(count, n uint64) uint64 {
	return min(addCost(count, n), MaxCharge)
}

// applyCount returns a counter of count after cost is applied: a refund
// takes it off (not below 0), anything else adds it (capped at MaxCharge).
func applyCount(count uint64, cost Cost) uint64 {
	if cost.Refund {
		return subCost(count, cost.N)
	}
	return chargeCount(count, cost.N)
}

// ceilMillis rounds an instant up to a whole millisecond, the grain at
// which stores keep expiries (a Redis PX, a counter record's e). Lua:
// math.ceil(x / 1000) * 1000.
func ceilMillis(x Micros) Micros {
	if m := floorMod(x, 1000); m != 0 {
		return x - m + 1000
	}
	return x
}
