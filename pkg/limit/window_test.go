package limit

import (
	"fmt"
	"testing"
	"time"
)

// at parses an RFC 3339 instant (with its offset) into Micros.
func at(t testing.TB, s string) Micros {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad instant %q: %v", s, err)
	}
	return v.UnixMicro()
}

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone %s: %v", name, err)
	}
	return loc
}

func show(m Micros, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	return time.UnixMicro(m).In(loc).Format(time.RFC3339Nano)
}

func TestWindowEpochAligned(t *testing.T) {
	tests := []struct {
		name       string
		rule       Rule
		now        string
		start, end string
	}{
		{"second", Rule{Unit: Second}, "2024-05-01T10:00:01.5Z", "2024-05-01T10:00:01Z", "2024-05-01T10:00:02Z"},
		{"second at edge", Rule{Unit: Second}, "2024-05-01T10:00:01Z", "2024-05-01T10:00:01Z", "2024-05-01T10:00:02Z"},
		{"second 1µs before edge", Rule{Unit: Second}, "2024-05-01T10:00:01.999999Z", "2024-05-01T10:00:01Z", "2024-05-01T10:00:02Z"},
		{"minute", Rule{Unit: Minute}, "2024-05-01T10:07:59Z", "2024-05-01T10:07:00Z", "2024-05-01T10:08:00Z"},
		{"5 minutes", Rule{Unit: Minute, Multiplier: 5}, "2024-05-01T10:07:59Z", "2024-05-01T10:05:00Z", "2024-05-01T10:10:00Z"},
		{"hour", Rule{Unit: Hour}, "1970-01-12T13:46:40Z", "1970-01-12T13:00:00Z", "1970-01-12T14:00:00Z"},
		// The reference's key for a day at now=1000000s ends in 950400.
		{"day", Rule{Unit: Day}, "1970-01-12T13:46:40Z", "1970-01-12T00:00:00Z", "1970-01-13T00:00:00Z"},
		// Epoch-aligned weeks start on Thursday, like the reference's.
		{"week starts Thursday", Rule{Unit: Week}, "2024-01-01T12:00:00Z", "2023-12-28T00:00:00Z", "2024-01-04T00:00:00Z"},
		// 30-day months: 19723 days since the epoch at 2024-01-01 → bucket 657 starts at day 19710.
		{"month is 30 days", Rule{Unit: Month}, "2024-01-01T00:00:00Z", "2023-12-19T00:00:00Z", "2024-01-18T00:00:00Z"},
		// 365-day years: day 19723 → bucket 54 starts at day 19710.
		{"year is 365 days", Rule{Unit: Year}, "2024-01-01T00:00:00Z", "2023-12-19T00:00:00Z", "2024-12-18T00:00:00Z"},
		{"before the epoch", Rule{Unit: Hour}, "1969-12-31T23:30:00Z", "1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end := tt.rule.Window(at(t, tt.now))
			if start != at(t, tt.start) || end != at(t, tt.end) {
				t.Errorf("Window(%s) = [%s, %s), want [%s, %s)", tt.now, show(start, nil), show(end, nil), tt.start, tt.end)
			}
		})
	}
}

func TestWindowCalendar(t *testing.T) {
	tests := []struct {
		name       string
		zone       string
		unit       Unit
		mult       uint32
		now        string
		start, end string
	}{
		// Plain days, and DST days of 23 and 25 hours.
		{"shanghai day", "Asia/Shanghai", Day, 1, "2024-05-01T23:59:59+08:00", "2024-05-01T00:00:00+08:00", "2024-05-02T00:00:00+08:00"},
		{"shanghai day edge", "Asia/Shanghai", Day, 1, "2024-05-02T00:00:00+08:00", "2024-05-02T00:00:00+08:00", "2024-05-03T00:00:00+08:00"},
		{"new york 23h day", "America/New_York", Day, 1, "2024-03-10T12:00:00-04:00", "2024-03-10T00:00:00-05:00", "2024-03-11T00:00:00-04:00"},
		{"new york 25h day", "America/New_York", Day, 1, "2024-11-03T01:30:00-05:00", "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00"},
		{"berlin 23h day", "Europe/Berlin", Day, 1, "2024-03-31T03:00:00+02:00", "2024-03-31T00:00:00+01:00", "2024-04-01T00:00:00+02:00"},
		{"berlin 25h day", "Europe/Berlin", Day, 1, "2024-10-27T02:30:00+01:00", "2024-10-27T00:00:00+02:00", "2024-10-28T00:00:00+01:00"},
		// 2024-01-01 is day 19723 since the epoch: two-day windows start on even days.
		{"shanghai 2 days", "Asia/Shanghai", Day, 2, "2024-01-01T10:00:00+08:00", "2023-12-31T00:00:00+08:00", "2024-01-02T00:00:00+08:00"},
		// Midnight skipped: the day starts at the jump (01:00 local).
		{"santiago no midnight", "America/Santiago", Day, 1, "2010-10-10T12:00:00-03:00", "2010-10-10T01:00:00-03:00", "2010-10-11T00:00:00-03:00"},
		{"santiago day before gap", "America/Santiago", Day, 1, "2010-10-09T23:59:59-04:00", "2010-10-09T00:00:00-04:00", "2010-10-10T01:00:00-03:00"},
		{"beirut no midnight", "Asia/Beirut", Day, 1, "2010-03-28T01:00:00+03:00", "2010-03-28T01:00:00+03:00", "2010-03-29T00:00:00+03:00"},
		// Fall-back at midnight: the day before lasts 25 hours.
		{"santiago 25h day", "America/Santiago", Day, 1, "2010-04-03T23:30:00-04:00", "2010-04-03T00:00:00-03:00", "2010-04-04T00:00:00-04:00"},
		// Midnight happens twice (01:00 CDT → 00:00 CST): the day starts at the first.
		{"havana twice midnight", "America/Havana", Day, 1, "2010-10-31T00:30:00-04:00", "2010-10-31T00:00:00-04:00", "2010-11-01T00:00:00-05:00"},
		{"havana second midnight", "America/Havana", Day, 1, "2010-10-31T00:30:00-05:00", "2010-10-31T00:00:00-04:00", "2010-11-01T00:00:00-05:00"},
		// Weeks start on Monday.
		{"new york week", "America/New_York", Week, 1, "2024-03-13T09:00:00-04:00", "2024-03-11T00:00:00-04:00", "2024-03-18T00:00:00-04:00"},
		{"new york week over DST", "America/New_York", Week, 1, "2024-03-10T23:00:00-04:00", "2024-03-04T00:00:00-05:00", "2024-03-11T00:00:00-04:00"},
		{"berlin week sunday night", "Europe/Berlin", Week, 1, "2024-06-09T23:59:59+02:00", "2024-06-03T00:00:00+02:00", "2024-06-10T00:00:00+02:00"},
		// Weeks since Monday 1970-01-05: 2024-01-01 starts week 2817, odd.
		{"shanghai 2 weeks", "Asia/Shanghai", Week, 2, "2024-01-03T00:00:00+08:00", "2023-12-25T00:00:00+08:00", "2024-01-08T00:00:00+08:00"},
		{"shanghai 2 weeks next", "Asia/Shanghai", Week, 2, "2024-01-10T00:00:00+08:00", "2024-01-08T00:00:00+08:00", "2024-01-22T00:00:00+08:00"},
		// Calendar months and years.
		{"berlin february leap", "Europe/Berlin", Month, 1, "2024-02-29T23:59:59+01:00", "2024-02-01T00:00:00+01:00", "2024-03-01T00:00:00+01:00"},
		{"berlin march DST", "Europe/Berlin", Month, 1, "2024-03-31T12:00:00+02:00", "2024-03-01T00:00:00+01:00", "2024-04-01T00:00:00+02:00"},
		{"new york month edge", "America/New_York", Month, 1, "2024-05-01T00:00:00-04:00", "2024-05-01T00:00:00-04:00", "2024-06-01T00:00:00-04:00"},
		{"new york month 1µs before", "America/New_York", Month, 1, "2024-04-30T23:59:59.999999-04:00", "2024-04-01T00:00:00-04:00", "2024-05-01T00:00:00-04:00"},
		{"shanghai quarter", "Asia/Shanghai", Month, 3, "2024-05-20T00:00:00+08:00", "2024-04-01T00:00:00+08:00", "2024-07-01T00:00:00+08:00"},
		{"shanghai year", "Asia/Shanghai", Year, 1, "2024-12-31T23:59:59+08:00", "2024-01-01T00:00:00+08:00", "2025-01-01T00:00:00+08:00"},
		{"new york year edge", "America/New_York", Year, 1, "2025-01-01T00:00:00-05:00", "2025-01-01T00:00:00-05:00", "2026-01-01T00:00:00-05:00"},
		{"berlin 2 years", "Europe/Berlin", Year, 2, "2025-07-01T00:00:00+02:00", "2024-01-01T00:00:00+01:00", "2026-01-01T00:00:00+01:00"},
		// Sub-day units count from local midnight.
		{"kathmandu hour", "Asia/Kathmandu", Hour, 1, "2024-06-01T10:30:00+05:45", "2024-06-01T10:00:00+05:45", "2024-06-01T11:00:00+05:45"},
		{"kathmandu 15 minutes", "Asia/Kathmandu", Minute, 15, "2024-06-01T10:44:59+05:45", "2024-06-01T10:30:00+05:45", "2024-06-01T10:45:00+05:45"},
		{"kolkata hour", "Asia/Kolkata", Hour, 1, "2024-06-01T00:59:59+05:30", "2024-06-01T00:00:00+05:30", "2024-06-01T01:00:00+05:30"},
		{"new york hour after spring forward", "America/New_York", Hour, 1, "2024-03-10T03:30:00-04:00", "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00"},
		// A 23-hour day cut into 5-hour windows: the last one is 3 hours long.
		{"new york 5h last window", "America/New_York", Hour, 5, "2024-03-10T22:00:00-04:00", "2024-03-10T21:00:00-04:00", "2024-03-11T00:00:00-04:00"},
		// On a 25-hour day hour windows follow elapsed time: 5 hours after
		// midnight is 04:00 EST, not 05:00.
		{"new york 5h on 25h day", "America/New_York", Hour, 5, "2024-11-03T04:30:00-05:00", "2024-11-03T04:00:00-05:00", "2024-11-03T09:00:00-05:00"},
		{"berlin second", "Europe/Berlin", Second, 1, "2024-06-01T10:00:00.25+02:00", "2024-06-01T10:00:00+02:00", "2024-06-01T10:00:01+02:00"},
		// A multiplier longer than a day is one day.
		{"shanghai 30 hours", "Asia/Shanghai", Hour, 30, "2024-06-01T10:00:00+08:00", "2024-06-01T00:00:00+08:00", "2024-06-02T00:00:00+08:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := zone(t, tt.zone)
			r := Rule{Unit: tt.unit, Multiplier: tt.mult, Location: loc}
			start, end := r.Window(at(t, tt.now))
			if start != at(t, tt.start) || end != at(t, tt.end) {
				t.Errorf("Window(%s) = [%s, %s), want [%s, %s)", tt.now, show(start, loc), show(end, loc), tt.start, tt.end)
			}
		})
	}
}

// TestWindowContiguous walks windows back to back through years with DST
// changes and skipped or doubled midnights: each window must contain the
// instant it was computed for, and the window at its end must start there.
func TestWindowContiguous(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Shanghai", "Asia/Kathmandu",
		"America/Santiago", "Asia/Beirut", "America/Havana", "Australia/Lord_Howe", "Pacific/Apia"}
	rules := []struct {
		unit Unit
		mult uint32
		span time.Duration // how far to walk
	}{
		{Hour, 1, 400 * 24 * time.Hour},
		{Minute, 45, 60 * 24 * time.Hour},
		{Hour, 7, 400 * 24 * time.Hour},
		{Day, 1, 3 * 365 * 24 * time.Hour},
		{Day, 3, 3 * 365 * 24 * time.Hour},
		{Week, 1, 3 * 365 * 24 * time.Hour},
		{Month, 1, 10 * 365 * 24 * time.Hour},
		{Month, 5, 10 * 365 * 24 * time.Hour},
		{Year, 1, 30 * 365 * 24 * time.Hour},
	}
	begin := at(t, "2009-06-15T07:00:00Z")
	for _, z := range zones {
		loc := zone(t, z)
		for _, rr := range rules {
			r := Rule{Unit: rr.unit, Multiplier: rr.mult, Location: loc}
			t.Run(fmt.Sprintf("%s/%d%s", z, rr.mult, rr.unit), func(t *testing.T) {
				now := begin
				stop := begin + rr.span.Microseconds()
				prevEnd := Micros(0)
				for now < stop {
					start, end := r.Window(now)
					if !(start <= now && now < end) {
						t.Fatalf("Window(%s) = [%s, %s) does not contain it", show(now, loc), show(start, loc), show(end, loc))
					}
					if prevEnd != 0 && start != prevEnd {
						t.Fatalf("window [%s, %s) does not start where the previous ended (%s)", show(start, loc), show(end, loc), show(prevEnd, loc))
					}
					if s2, e2 := r.Window(end - 1); s2 != start || e2 != end {
						t.Fatalf("Window(end-1µs) = [%s, %s), want [%s, %s)", show(s2, loc), show(e2, loc), show(start, loc), show(end, loc))
					}
					if rr.unit >= Day {
						// Calendar windows start on a local date boundary.
						sec := floorDiv(start, microsPerSecond)
						if localDay(sec, loc) == localDay(sec-1, loc) {
							t.Fatalf("window start %s is not the first instant of a local day", show(start, loc))
						}
					}
					prevEnd = end
					now = end
				}
			})
		}
	}
}

func TestPeriodSaturates(t *testing.T) {
	tests := []struct {
		rule Rule
		want int64
	}{
		{Rule{Unit: Second}, 1e6},
		{Rule{Unit: Minute, Multiplier: 5}, 300e6},
		{Rule{Unit: Month}, 30 * 86400e6},
		{Rule{Unit: Year, Multiplier: 100}, MaxPeriodMicros},
		{Rule{Unit: Year, Multiplier: 4_000_000_000}, MaxPeriodMicros},
		{Rule{Unit: Week, Multiplier: 4_000_000_000}, MaxPeriodMicros},
		{Rule{Unit: UnitUnknown}, 0},
		{Rule{Unit: Unit(42)}, 0},
	}
	for _, tt := range tests {
		if got := tt.rule.PeriodMicros(); got != tt.want {
			t.Errorf("%v: PeriodMicros = %d, want %d", tt.rule, got, tt.want)
		}
		if got := tt.rule.Period(); got != time.Duration(tt.want)*time.Microsecond {
			t.Errorf("%v: Period = %v", tt.rule, got)
		}
	}
	// Huge calendar multipliers neither overflow nor panic.
	loc := zone(t, "Europe/Berlin")
	now := at(t, "2024-06-01T00:00:00Z")
	for _, u := range []Unit{Second, Hour, Day, Week, Month, Year} {
		r := Rule{Unit: u, Multiplier: 4_000_000_000, Location: loc}
		start, end := r.Window(now)
		if !(start <= now && now < end) || end-start > MaxPeriodMicros+40*86400e6 {
			t.Errorf("%v: Window = [%d, %d)", r, start, end)
		}
	}
}
