package limit

import "sort"

// SlidingLog: State{Log}, one instant per admitted unit of cost, oldest
// first. With P = PeriodMicros(), L = Limit, N = cost.N (all integers):
//
//	live   = the entries t of s.Log with t + P > now (a suffix of the log)
//	c      = len(live)
//	admit  iff c + N ≤ L
//	apply  drop the expired entries, append N copies of now
//	refund drop the expired entries, then the min(N, c) newest
//	Remaining = max(0, L - c')                  c' = c after the request if admitted
//	Reset admitted, peek, refund: 0 if c' == 0, else newest + P - now
//	Reset denied:
//	  N > L: 0 if c == 0, else live[c-1] + P - now     (whole again)
//	  else:  live[k-1] + P - now with k = c + N - L    (the k oldest must expire)
//	Expiry = newest + P (0 when the log is empty)
//
// The log is exact: a client that waits Reset after a denial is admitted,
// and one that waits Reset-1µs is not. After Apply the log holds at most
// max(L, entries already there) instants.

// logLive returns the index of the first entry of s.Log still live at now.
func (r Rule) logLive(s *State, now Micros) int {
	p := r.PeriodMicros()
	return sort.Search(len(s.Log), func(i int) bool { return s.Log[i]+p > now })
}

func (r Rule) logCheck(s *State, now Micros, cost Cost) Outcome {
	p := r.PeriodMicros()
	live := s.Log[r.logLive(s, now):]
	c := uint64(len(live))
	l, n := r.Limit, cost.N
	var o Outcome
	switch {
	case cost.Refund:
		o.Allowed = true
		drop := min(n, c)
		c -= drop
		live = live[:c]
	case fits(c, n, l):
		o.Allowed = true
		c += n
	}
	o.Remaining = subCost(l, c)
	switch {
	case o.Allowed && c == 0:
	case o.Allowed && n > 0 && !cost.Refund:
		o.Reset = resetOf(p) // the newest entry is now
	case o.Allowed || n > l:
		if len(live) > 0 {
			o.Reset = resetOf(live[len(live)-1] + p - now)
		}
	default:
		k := c + n - l // 1 ≤ k ≤ c
		o.Reset = resetOf(live[k-1] + p - now)
	}
	return o
}

func (r Rule) logApply(s *State, now Micros, cost Cost) {
	// Drop expired entries in place so the log reuses its array.
	if i := r.logLive(s, now); i > 0 {
		s.Log = s.Log[:copy(s.Log, s.Log[i:])]
	}
	if cost.Refund {
		s.Log = s.Log[:uint64(len(s.Log))-min(cost.N, uint64(len(s.Log)))]
		return
	}
	for range cost.N {
		s.Log = append(s.Log, now)
	}
}
