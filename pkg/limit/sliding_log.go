package limit

import "sort"

// SlidingLog: State{Log}, one entry {At, N, Sum} per admitted or charged
// request, oldest first, where Sum is the running total of N (float64).
// With P = PeriodMicros(), L = Limit, N = cost.N (integers unless noted):
//
//	live   = the entries with At + P > now (a suffix of the log, from index i)
//	base   = live[0].Sum - live[0].N             (float64; the Sum before it)
//	c      = live[last].Sum - base               (0 when nothing is live)
//	admit  iff c + N ≤ L
//	apply  drop the expired entries, append {now, N, Sum} with
//	       Sum = newest.Sum + N (N when the log is empty)
//	charge (a charged cost that does not fit) as apply, with
//	       N' = min(N, 2^53 - c) (nothing when N' is 0)
//	rebase before appending N when N > 2^53 - newest.Sum: subtract base
//	       from every Sum (O(n), once the sums have grown by 2^53), so
//	       every Sum stays an exact integer
//	refund drop the expired entries, then m = min(N, c) units from the
//	       newest end: whole entries while their N ≤ what is left to drop,
//	       then the newest remaining entry loses the rest (N and Sum)
//	Remaining = max(0, L - c')                   c' = c after the request
//	Reset admitted or charged (N > 0): P (the newest entry is now)
//	      (a charge reports c' = c + N')
//	Reset peek, refund: 0 if c' == 0, else newest' + P - now
//	      where newest' = the first live entry with Sum - base ≥ c'
//	Reset denied:
//	  N > L: 0 if c == 0, else live[last].At + P - now  (whole again)
//	  else:  k = c - (L - N) units must expire: the first live entry j with
//	         live[j].Sum - base ≥ k, Reset = live[j].At + P - now
//	Expiry = newest.At + P (0 when the log is empty)
//
// The entries found by "the first live entry with Sum - base ≥ x" are found
// by binary search: every call costs O(log n) for a log of n entries, and
// adds at most one entry, whatever its cost. The log is exact: a client
// that waits Reset after a denial is admitted, and one that waits
// Reset-1µs is not.

// logLive returns the index of the first entry of s.Log still live at now.
func (r Rule) logLive(s *State, now Micros) int {
	p := r.PeriodMicros()
	return sort.Search(len(s.Log), func(i int) bool { return s.Log[i].At+p > now })
}

// logBase returns the Sum before live[0] and the total cost of live.
func logBase(live []LogEntry) (base float64, c uint64) {
	if len(live) == 0 {
		return 0, 0
	}
	base = live[0].Sum - float64(live[0].N)
	return base, uint64(live[len(live)-1].Sum - base)
}

// logCharge returns what a charged cost n adds to a log holding c: n,
// capped so the total stays at most MaxCharge.
func logCharge(c, n uint64) uint64 {
	if c >= MaxCharge {
		return 0
	}
	return min(n, MaxCharge-c)
}

// logReach returns the index of the first entry of live whose Sum - base is
// at least x; len(live)-1 when none is (x beyond the total).
func logReach(live []LogEntry, base float64, x uint64) int {
	j := sort.Search(len(live), func(j int) bool { return live[j].Sum-base >= float64(x) })
	return min(j, len(live)-1)
}

func (r Rule) logCheck(s *State, now Micros, cost Cost) Outcome {
	p := r.PeriodMicros()
	live := s.Log[r.logLive(s, now):]
	base, c := logBase(live)
	l, n := r.Limit, cost.N
	var o Outcome
	switch {
	case cost.Refund:
		o.Allowed = true
		c -= min(n, c)
		if c > 0 {
			o.Reset = resetOf(live[logReach(live, base, c)].At + p - now)
		}
	case fits(c, n, l):
		o.Allowed = true
		c += n
		switch {
		case n > 0:
			o.Reset = resetOf(p) // the newest entry is now
		case c > 0:
			o.Reset = resetOf(live[len(live)-1].At + p - now)
		}
	case cost.Charge && n > 0:
		c += logCharge(c, n)
		o.Reset = resetOf(p)
	case n > l:
		if c > 0 {
			o.Reset = resetOf(live[len(live)-1].At + p - now)
		}
	default:
		k := c - (l - n) // 1 ≤ k ≤ c; in this order, exact in Lua too
		o.Reset = resetOf(live[logReach(live, base, k)].At + p - now)
	}
	o.Remaining = subCost(l, c)
	return o
}

func (r Rule) logApply(s *State, now Micros, cost Cost) {
	// Drop expired entries: the log's array is reused once append has to
	// grow it, so each entry is copied O(1) times on average.
	s.Log = s.Log[r.logLive(s, now):]
	if len(s.Log) == 0 {
		s.Log = s.Log[:0:0]
	}
	_, c := logBase(s.Log)
	if cost.Refund {
		m := min(cost.N, c)
		for m > 0 {
			e := &s.Log[len(s.Log)-1]
			if e.N <= m {
				m -= e.N
				s.Log = s.Log[:len(s.Log)-1]
				continue
			}
			e.N -= m
			e.Sum -= float64(m)
			m = 0
		}
		return
	}
	n := cost.N
	if !fits(c, n, r.Limit) {
		n = logCharge(c, n)
	}
	if n == 0 {
		return
	}
	sum := float64(n)
	if k := len(s.Log); k > 0 {
		if last := s.Log[k-1].Sum; float64(n) > float64(MaxCharge)-last {
			base := s.Log[0].Sum - float64(s.Log[0].N)
			for i := range s.Log {
				s.Log[i].Sum -= base
			}
		}
		sum = s.Log[k-1].Sum + float64(n)
	}
	s.Log = append(s.Log, LogEntry{At: now, N: n, Sum: sum})
}
