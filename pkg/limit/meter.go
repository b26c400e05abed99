package limit

import "math"

// Meters (TokenBucket, LeakyBucket, GCRA): State{Level, At}. One
// implementation serves all three; they admit exactly the same sequences
// (docs/decisions/0002-one-meter-for-three-buckets.md).
//
// Token bucket: tokens = capacity − level; refill = drain. A token
// bucket's refill is computed by drain below (the memory backend) and by
// drain in pkg/scripts/meter.lua (the Redis backend), which mirrors this
// file formula by formula.
//
// Level is the cost
// held in a bucket of capacity C = Capacity() that drains continuously at
// L = Limit per P = PeriodMicros(). With N = cost.N, in float64:
//
//	elapsed = max(0, now - At)                                (int64)
//	drain(Level, At, now) = max(0, Level - float64(float64(elapsed) * float64(L)) / float64(P))
//	    when L == 0 the bucket never drains; instead the level is forgotten
//	    one period after At: drain = 0 if elapsed ≥ P, else Level
//	lv     = drain(s.Level, s.At, now)
//	admit  iff lv + float64(N) ≤ float64(C)
//	apply  Level = lv + float64(N), At = now
//	charge (a charged cost that does not fit) as apply, but what it owes is
//	       capped at one period: Level passes C by at most L (one period's
//	       drain), and a charge never lowers a level already above that:
//	       top   = max(lv, min(float64(C) + float64(L), 2^53))
//	       Level = min(lv + float64(min(N, MaxCharge)), top), as Lua computes it
//	refund Level = max(0, lv - float64(N)), At = now
//	Remaining = floor(float64(C) - lv')                       lv' = level after the request if admitted
//	wholeAt(Level, At) = At if Level ≤ 0, else
//	    L == 0: At + P
//	    L > 0:  w = ceil(float64(Level * float64(P)) / float64(L))
//	            2^53 (an instant, year 2255) if w ≥ 2^53 - At, else
//	            settle(At + w, At, drain(Level, At, t) == 0)
//	Reset admitted, charged, peek, refund: wholeAt(state after the request) - now
//	Reset denied:
//	  N > C:  wholeAt(s.Level, s.At) - now
//	  L == 0: s.At + P - now
//	  else:   w = ceil(float64((lv + float64(N) - float64(C)) * float64(P)) / float64(L))
//	          2^53 - now if w ≥ 2^53 - now (a charged level years deep), else
//	          t = settle(now + w, now, drain(s.Level, s.At, t) + float64(N) ≤ float64(C)), Reset = t - now
//	Expiry = wholeAt(s.Level, s.At) (0 once it has passed)
//
// settle (arith.go) corrects the float rounding of the closed formulas so a
// client that waits exactly Reset is admitted and one that waits Reset-1µs
// is not.

// drain returns the level a bucket that held level at instant at holds at
// now: the leak of a leaky bucket, the refill of a token bucket (tokens =
// capacity − level, so refill = drain).
func (r Rule) drain(level float64, at, now Micros) float64 {
	p := r.PeriodMicros()
	elapsed := now - at
	if elapsed < 0 {
		elapsed = 0
	}
	if r.Limit == 0 {
		if elapsed >= p {
			return 0
		}
		return level
	}
	lv := level - float64(float64(elapsed)*float64(r.Limit))/float64(p)
	if lv < 0 {
		return 0
	}
	return lv
}

// meterWholeAt is the first instant at which a bucket that held level at
// instant at is empty; at itself when it is already empty.
func (r Rule) meterWholeAt(level float64, at Micros) Micros {
	if !(level > 0) {
		return at
	}
	p := r.PeriodMicros()
	if r.Limit == 0 {
		return at + p
	}
	w := ceilMicros(float64(level*float64(p)) / float64(r.Limit))
	if w >= maxInstant-at {
		return maxInstant
	}
	return settle(at+w, at, func(t Micros) bool { return r.drain(level, at, t) <= 0 })
}

func (r Rule) meterCheck(s *State, now Micros, cost Cost) Outcome {
	p := r.PeriodMicros()
	c, n := float64(r.Capacity()), float64(cost.N)
	lv := r.drain(s.Level, s.At, now)
	var o Outcome
	charged := false
	switch {
	case cost.Refund:
		o.Allowed = true
		lv = math.Max(0, lv-n)
	case lv+n <= c:
		o.Allowed = true
		lv += n
	case cost.Charge && cost.N > 0:
		charged = true
		lv = r.chargeLevel(lv, cost.N)
	}
	o.Remaining = floorCount(c - lv)
	switch {
	case (o.Allowed || charged) && cost.N > 0:
		// The state after the request: Level = lv, At = now.
		o.Reset = resetOf(r.meterWholeAt(lv, now) - now)
	case o.Allowed || cost.N > r.Capacity():
		o.Reset = resetOf(r.meterWholeAt(s.Level, s.At) - now)
	case r.Limit == 0:
		o.Reset = resetOf(s.At + p - now)
	default:
		w := ceilMicros(float64((lv+n-c)*float64(p)) / float64(r.Limit))
		if w >= maxInstant-now {
			o.Reset = resetOf(maxInstant - now)
			break
		}
		t := settle(now+w, now, func(t Micros) bool { return r.drain(s.Level, s.At, t)+n <= c })
		o.Reset = resetOf(t - now)
	}
	return o
}

func (r Rule) meterApply(s *State, now Micros, cost Cost) {
	lv := r.drain(s.Level, s.At, now)
	switch n := float64(cost.N); {
	case cost.Refund:
		lv = math.Max(0, lv-n)
	case lv+n <= float64(r.Capacity()):
		lv += n
	default:
		lv = r.chargeLevel(lv, cost.N)
	}
	s.Level, s.At = lv, now
}

// chargeLevel is the level after a charged cost n that does not fit on a
// bucket at level lv: lv + n, but at most one period's drain (Limit) above
// the capacity, so that one charge, however large, owes at most one
// period; a level already above that is kept, never lowered.
func (r Rule) chargeLevel(lv float64, n uint64) float64 {
	top := math.Max(lv, math.Min(float64(r.Capacity())+float64(r.Limit), float64(MaxCharge)))
	return math.Min(lv+float64(min(n, MaxCharge)), top)
}
