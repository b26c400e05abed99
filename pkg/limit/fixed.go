package limit

// FixedWindow: State{Window, Count}.
//
//	[start, end) = r.Window(now)
//	count        = s.Count if s.Window == start, else 0
//	admit        iff count + N ≤ L              (integers)
//	apply        Window = start, Count = count + N
//	charge       (a charged cost that does not fit) Count = min(count + N, MaxCharge)
//	refund       Window = start, Count = max(0, count - N)
//	Remaining    = max(0, L - count')           count' = count after the request if admitted
//	Reset        = end - now                    always: admitted, denied, peek, refund
//	Expiry       = end of s.Window's window     (0 when Count == 0)
//
// A denied client that waits Reset is in the next window, where count is 0;
// at Reset-1µs it is still in the same window, still denied.

// fwCount returns the window containing now and the cost counted in it.
func (r Rule) fwCount(s *State, now Micros) (start, end Micros, count uint64) {
	start, end = r.Window(now)
	if s.Window == start {
		count = s.Count
	}
	return start, end, count
}

func (r Rule) fwCheck(s *State, now Micros, cost Cost) Outcome {
	_, end, count := r.fwCount(s, now)
	o := Outcome{Reset: resetOf(end - now)}
	switch {
	case cost.Refund:
		o.Allowed = true
		count = subCost(count, cost.N)
	case fits(count, cost.N, r.Limit):
		o.Allowed = true
		count += cost.N
	case cost.Charge:
		count = chargeCount(count, cost.N)
	}
	o.Remaining = subCost(r.Limit, count)
	return o
}

func (r Rule) fwApply(s *State, now Micros, cost Cost) {
	start, _, count := r.fwCount(s, now)
	count = applyCount(count, cost)
	s.Window, s.Count = start, count
}
