package denycache

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// A cached denial is answered locally for MaxAge at most, then the store
// is asked again, however long the denial lasts; the default bound is
// DefaultMaxAge.
func TestMaxAge(t *testing.T) {
	hourly := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	tests := []struct {
		name    string
		maxAge  time.Duration
		bound   time.Duration // answered locally before it, asked again at it
		forever bool          // no bound: still cached at the check
	}{
		{"default", 0, DefaultMaxAge, false},
		{"configured", 3 * time.Second, 3 * time.Second, false},
		{"unbounded", -1, 20 * time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Options{MaxAge: tt.maxAge})
			if tt.maxAge == 0 {
				f.b.maxAge = DefaultMaxAge.Microseconds() // newFixture turns 0 into no bound
			}
			f.do("k", hourly, 1, false)
			if d, cached := f.do("k", hourly, 1, false); d.Allowed || cached {
				t.Fatalf("over the limit: allowed %v cached %v, want the store's denial", d.Allowed, cached)
			}
			f.clock.Advance(tt.bound - time.Millisecond)
			if d, cached := f.do("k", hourly, 1, false); d.Allowed || !cached {
				t.Fatalf("just before the bound: allowed %v cached %v, want the cached denial", d.Allowed, cached)
			}
			f.clock.Advance(time.Millisecond)
			d, cached := f.do("k", hourly, 1, false)
			if d.Allowed || cached != tt.forever {
				t.Fatalf("at the bound: allowed %v cached %v, want a denial, cached %v", d.Allowed, cached, tt.forever)
			}
		})
	}
}

// Refunds and resets are announced, after the fact; denials, admissions
// and peeks are not. ForgetAll forgets every identity.
func TestAnnounceAndForgetAll(t *testing.T) {
	var announced []string
	f := newFixture(t, Options{Announce: func(id string) { announced = append(announced, id) }})
	f.do("a", fixed3, 1, false)
	f.do("a", fixed3, 0, false)
	f.do("a", fixed3, 1, true)
	if err := f.b.Reset(context.Background(), "b", fixed3); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(announced, want) {
		t.Fatalf("announced %q, want %q", announced, want)
	}
	for _, id := range []string{"x", "y", "z"} {
		for range 4 {
			f.do(id, fixed3, 1, false)
		}
	}
	if f.b.Len() != 3 {
		t.Fatalf("cache holds %d identities, want 3", f.b.Len())
	}
	f.b.ForgetAll()
	if f.b.Len() != 0 {
		t.Fatalf("after ForgetAll the cache holds %d identities", f.b.Len())
	}
	if _, cached := f.do("x", fixed3, 1, false); cached {
		t.Fatal("after ForgetAll a denial was answered from the cache")
	}
}
