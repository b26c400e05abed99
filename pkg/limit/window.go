package limit

import "time"

// MaxPeriodMicros is the longest period a rule can have: 100 years of 365
// days. PeriodMicros saturates at it, so instants such as a window start
// plus two periods stay exact in a float64 (Lua) for centuries.
const MaxPeriodMicros int64 = 100 * 365 * 86400 * 1e6

const (
	microsPerSecond = 1_000_000
	secondsPerDay   = 86400
	// epochMonday is 1970-01-05, the first Monday after the Unix epoch, in
	// days since 1970-01-01.
	epochMonday = 4
)

// Window returns the bounds [start, end) of the fixed window containing
// now; end is the next window's start.
//
// Without a Location, windows are aligned to the Unix epoch, as
// envoyproxy/ratelimit aligns them: start = now - (now mod P) with
// P = PeriodMicros() (so weeks start on Thursday 00:00 UTC and a month is a
// 30-day bucket).
//
// With a Location, windows follow the local calendar of that zone, and the
// multiplier m groups whole calendar units counted from the epoch:
//
//   - day: local midnight; local dates since 1970-01-01, floored to m.
//   - week: Monday 00:00; weeks since Monday 1970-01-05, floored to m.
//   - month: the 1st at 00:00; months since 1970-01, floored to m.
//   - year: January 1st at 00:00; years since 1970, floored to m.
//   - second, minute, hour: local midnight plus a whole number of m units of
//     elapsed (real) time; the last window of a day ends at the next local
//     midnight. On a 23- or 25-hour day, hour windows therefore follow
//     elapsed time, not the wall clock, after the transition.
//
// A local midnight that does not exist (the clocks jump over it) is replaced
// by the first instant of that local date, so windows stay contiguous. A
// rule with an unknown unit returns (now, now).
func (r Rule) Window(now Micros) (start, end Micros) {
	p := r.PeriodMicros()
	if p <= 0 {
		return now, now
	}
	if r.Location != nil {
		if start, end, ok := r.calendarWindow(now); ok {
			return start, end
		}
	}
	start = now - floorMod(now, p)
	return start, start + p
}

// calendarWindow computes Window for rules with a Location. ok is false in
// the (pathological) case of a zone whose local date runs backwards across
// now; the caller then falls back to epoch alignment.
func (r Rule) calendarWindow(now Micros) (start, end Micros, ok bool) {
	loc := r.Location
	unit := r.Unit.Seconds()
	// The multiplier in whole units, capped so one window spans at most
	// MaxPeriodMicros (or one day for sub-day units).
	m := r.multiplier()
	day := localDay(floorDiv(now, microsPerSecond), loc)
	switch r.Unit {
	case Day, Week, Month, Year:
		max := MaxPeriodMicros / (unit * microsPerSecond)
		if r.Unit == Month {
			max = 1200 // 100 calendar years, not 100 × 365 / 30 months
		}
		m = min(m, max)
	}
	switch r.Unit {
	case Day:
		d0 := day - floorMod(day, m)
		start, end = dayStart(d0, loc), dayStart(d0+m, loc)
	case Week:
		w := floorDiv(day-epochMonday, 7)
		w0 := w - floorMod(w, m)
		start, end = dayStart(epochMonday+7*w0, loc), dayStart(epochMonday+7*(w0+m), loc)
	case Month:
		y, mo, _ := time.Unix(day*secondsPerDay, 0).UTC().Date()
		mi := int64(y-1970)*12 + int64(mo) - 1
		m0 := mi - floorMod(mi, m)
		start, end = dayStart(monthDay(m0), loc), dayStart(monthDay(m0+m), loc)
	case Year:
		y := int64(time.Unix(day*secondsPerDay, 0).UTC().Year()) - 1970
		y0 := y - floorMod(y, m)
		start, end = dayStart(monthDay(12*y0), loc), dayStart(monthDay(12*(y0+m)), loc)
	default: // Second, Minute, Hour
		ds, de := dayStart(day, loc), dayStart(day+1, loc)
		w := m * unit * microsPerSecond
		if m > secondsPerDay/unit {
			w = secondsPerDay * microsPerSecond
		}
		start = ds + floorDiv(now-ds, w)*w
		end = start + w
		if end > de {
			end = de
		}
	}
	return start, end, start <= now && now < end
}

// localDay returns the local date of the instant sec (Unix seconds) in loc,
// as days since 1970-01-01.
func localDay(sec int64, loc *time.Location) int64 {
	_, off := time.Unix(sec, 0).In(loc).Zone()
	return floorDiv(sec+int64(off), secondsPerDay)
}

// dayStart returns the first instant, in µs, whose local date in loc is day
// (days since 1970-01-01) or later. That is local midnight, unless the
// clocks skip midnight that day: then it is the instant of the jump.
func dayStart(day int64, loc *time.Location) Micros {
	c := time.Date(1970, time.January, 1+int(day), 0, 0, 0, 0, loc).Unix()
	if localDay(c, loc) >= day && localDay(c-1, loc) < day {
		return c * microsPerSecond
	}
	// time.Date resolved a skipped or repeated midnight to some instant
	// near the true start of the day. Zone offsets and transitions are whole
	// seconds, so search the seconds around it: localDay(lo) < day ≤
	// localDay(hi).
	lo, hi := c-2*secondsPerDay, c+2*secondsPerDay
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		if localDay(mid, loc) >= day {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi * microsPerSecond
}

// monthDay returns the first day of month mi (months since 1970-01) in days
// since 1970-01-01.
func monthDay(mi int64) int64 {
	y := 1970 + floorDiv(mi, 12)
	mo := time.Month(floorMod(mi, 12) + 1)
	return floorDiv(time.Date(int(y), mo, 1, 0, 0, 0, 0, time.UTC).Unix(), secondsPerDay)
}
