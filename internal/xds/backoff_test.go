package xds

import (
	"testing"
	"time"
)

// TestBackoff: waits double from initial to max; jitter spreads each over
// ±factor; reset starts over.
func TestBackoff(t *testing.T) {
	s := time.Second
	cases := []struct {
		name   string
		jitter bool
		rand   float64
		want   []time.Duration
	}{
		{"no jitter", false, 0, []time.Duration{s, 2 * s, 4 * s, 8 * s, 10 * s, 10 * s}},
		{"jitter, middle draw", true, 0.5, []time.Duration{s, 2 * s, 4 * s, 8 * s, 10 * s, 10 * s}},
		{"jitter, lowest draw", true, 0, []time.Duration{s / 2, s, 2 * s, 4 * s, 5 * s, 5 * s}},
		{"jitter, high draw", true, 0.75, []time.Duration{1250 * time.Millisecond, 2500 * time.Millisecond, 5 * s, 10 * s, 12500 * time.Millisecond, 12500 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := backoff{initial: s, max: 10 * s, factor: 0.5, jitter: tc.jitter, rand: func() float64 { return tc.rand }}
			for i, want := range tc.want {
				if got := b.next(); got != want {
					t.Fatalf("wait %d = %v, want %v", i, got, want)
				}
			}
			b.reset()
			if got, want := b.next(), tc.want[0]; got != want {
				t.Fatalf("after reset: %v, want %v", got, want)
			}
		})
	}
}

// TestParseNodeMetadataAndHeaders covers the two list formats.
func TestParseNodeMetadataAndHeaders(t *testing.T) {
	md := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"a=1", map[string]string{"a": "1"}, false},
		{"a=1,b=x=y,c=", map[string]string{"a": "1", "b": "x=y", "c": ""}, false},
		{"a=1,b", nil, true},
		{"=1", nil, true},
	}
	for _, tc := range md {
		got, err := ParseNodeMetadata(tc.in)
		if (err != nil) != tc.wantErr || !equal(got, tc.want) {
			t.Errorf("ParseNodeMetadata(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	hs := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"X-Token:abc", map[string]string{"x-token": "abc"}, false},
		{"a:1,b:http://x", map[string]string{"a": "1", "b": "http://x"}, false},
		{"a:1,b", nil, true},
	}
	for _, tc := range hs {
		got, err := ParseHeaders(tc.in)
		if (err != nil) != tc.wantErr || !equal(got, tc.want) {
			t.Errorf("ParseHeaders(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
