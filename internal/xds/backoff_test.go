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
	tests := []struct {
		fn      string // which parser
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"ParseNodeMetadata", "", map[string]string{}, false},
		{"ParseNodeMetadata", "a=1", map[string]string{"a": "1"}, false},
		{"ParseNodeMetadata", "a=1,b=x=y,c=", map[string]string{"a": "1", "b": "x=y", "c": ""}, false},
		{"ParseNodeMetadata", "a=1,b", nil, true},
		{"ParseNodeMetadata", "=1", nil, true},
		{"ParseHeaders", "", map[string]string{}, false},
		{"ParseHeaders", "X-Token:abc", map[string]string{"x-token": "abc"}, false},
		{"ParseHeaders", "a:1,b:http://x", map[string]string{"a": "1", "b": "http://x"}, false},
		{"ParseHeaders", "a:1,b", nil, true},
	}
	parsers := map[string]func(string) (map[string]string, error){"ParseNodeMetadata": ParseNodeMetadata, "ParseHeaders": ParseHeaders}
	for _, tc := range tests {
		got, err := parsers[tc.fn](tc.in)
		if (err != nil) != tc.wantErr || !equal(got, tc.want) {
			t.Errorf("%s(%q) = %v, %v; want %v, error %v", tc.fn, tc.in, got, err, tc.want, tc.wantErr)
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
