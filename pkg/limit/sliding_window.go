package limit

// SlidingWindow: State{Window, Count, Prev}. Windows are always aligned to
// the epoch (the Location is ignored). With P = PeriodMicros(), L = Limit,
// N = cost.N, all of them converted to float64 where a float appears:
//
//	start  = now - (now mod P)
//	roll   if s.Window == start:      prev, cur = s.Prev, s.Count
//	       elif s.Window == start-P:  prev, cur = s.Count, 0
//	       else:                      prev, cur = 0, 0
//	e      = now - start                                  (int64, 0 ≤ e < P)
//	est(c) = float64(float64(prev) * float64(P-e)) / float64(P) + float64(c)
//	admit  iff est(cur) + float64(N) ≤ float64(L)
//	apply  Window = start, Prev = prev, Count = min(cur + N, MaxCharge)
//	charge (a charged cost that does not fit) as apply
//	refund Window = start, Prev = prev, Count = max(0, cur - N)
//	Remaining = max(0, floor(float64(L) - est(cur')))     cur' = cur after the request if admitted
//	whole(cur') = start+2P if cur' > 0; start+P if prev > 0; else now
//	Reset admitted, charged, peek, refund: whole(cur') - now
//	Reset denied:
//	  N > L:           whole(cur) - now
//	  cur + N ≤ L:     t = start + P - floor(float64(float64(L-cur-N) * float64(P)) / float64(prev))
//	  cur + N > L:     t = start + 2P - floor(float64(float64(L-N) * float64(P)) / float64(cur))
//	  then t = settle(t, now, admitted at t), Reset = t - now
//	Expiry = s.Window+2P if s.Count > 0; s.Window+P if s.Prev > 0; else 0
//
// In the denied case cur + N ≤ L only the previous window's weight is in
// the way: the smallest e' with prev·(P-e')/P ≤ L-cur-N. When cur + N > L
// the wait runs into the next window, where cur becomes the previous count.
// settle (arith.go) corrects the float rounding of the closed formula by
// evaluating the admission test itself, so waiting exactly Reset admits and
// Reset-1µs does not.

// swRoll returns the current window's start and the (prev, cur) counts of
// s as seen at now.
func (r Rule) swRoll(s *State, now Micros) (start Micros, prev, cur uint64) {
	p := r.PeriodMicros()
	start = now - floorMod(now, p)
	switch s.Window {
	case start:
		return start, s.Prev, s.Count
	case start - p:
		return start, s.Count, 0
	}
	return start, 0, 0
}

// swEst is the estimated cost in the last period ending at start+e when the
// previous window counted prev and the current one cur.
func swEst(prev, cur uint64, e, p int64) float64 {
	return float64(float64(prev)*float64(p-e))/float64(p) + float64(cur)
}

// swAdmits reports whether cost n would be admitted against s at t.
func (r Rule) swAdmits(s *State, t Micros, n uint64) bool {
	start, prev, cur := r.swRoll(s, t)
	return swEst(prev, cur, t-start, r.PeriodMicros())+float64(n) <= float64(r.Limit)
}

// swWhole is when a state with these counts, rolled at start, holds
// nothing; now when it already holds nothing.
func swWhole(start, now Micros, p int64, prev, cur uint64) Micros {
	switch {
	case cur > 0:
		return start + 2*p
	case prev > 0:
		return start + p
	}
	return now
}

func (r Rule) swCheck(s *State, now Micros, cost Cost) Outcome {
	p := r.PeriodMicros()
	start, prev, cur := r.swRoll(s, now)
	e := now - start
	l, n := r.Limit, cost.N
	var o Outcome
	charged := false
	switch {
	case cost.Refund:
		o.Allowed = true
		cur = subCost(cur, n)
	case swEst(prev, cur, e, p)+float64(n) <= float64(l):
		o.Allowed = true
		cur = chargeCount(cur, n)
	case cost.Charge && n > 0:
		charged = true
		cur = chargeCount(cur, n)
	}
	o.Remaining = floorCount(float64(l) - swEst(prev, cur, e, p))
	if o.Allowed || charged || n > l {
		o.Reset = resetOf(swWhole(start, now, p, prev, cur) - now)
		return o
	}
	var t Micros
	if fits(cur, n, l) {
		t = start + p - int64(float64(float64(l-cur-n)*float64(p))/float64(prev))
	} else {
		t = start + 2*p - int64(float64(float64(l-n)*float64(p))/float64(cur))
	}
	t = settle(t, now, func(t Micros) bool { return r.swAdmits(s, t, n) })
	o.Reset = resetOf(t - now)
	return o
}

func (r Rule) swApply(s *State, now Micros, cost Cost) {
	start, prev, cur := r.swRoll(s, now)
	cur = applyCount(cur, cost)
	s.Window, s.Prev, s.Count = start, prev, cur
}

func (r Rule) swExpiry(s *State) Micros {
	p := r.PeriodMicros()
	switch {
	case s.Count > 0:
		return s.Window + 2*p
	case s.Prev > 0:
		return s.Window + p
	}
	return 0
}
