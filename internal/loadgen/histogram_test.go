package loadgen

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramKnownInputs(t *testing.T) {
	var h Histogram
	// 1..1000 µs, once each.
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 500 * time.Microsecond},
		{0.9, 900 * time.Microsecond},
		{0.99, 990 * time.Microsecond},
		{0.999, 999 * time.Microsecond},
		{1, 1000 * time.Microsecond},
		{0.001, time.Microsecond},
	} {
		got := h.Quantile(tt.q)
		// Never below the true value, at most 1/128 above it.
		if got < tt.want || float64(got) > float64(tt.want)*(1+1.0/128) {
			t.Errorf("q%.3f = %v, want %v (+0.8%%)", tt.q, got, tt.want)
		}
	}
	if h.Count() != 1000 || h.Min() != time.Microsecond || h.Max() != time.Millisecond || h.Mean() != 500500*time.Nanosecond {
		t.Errorf("count %d min %v max %v mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

func TestHistogramSmallValuesExact(t *testing.T) {
	var h Histogram
	for _, v := range []time.Duration{0, 1, 2, 3, 127, -5} {
		h.Record(v)
	}
	// Sorted: 0 0 1 2 3 127 (the negative one counts as 0).
	want := map[float64]time.Duration{0.34: 1, 0.5: 1, 0.6: 2, 0.67: 3, 1: 127, 0.1: 0}
	for q, w := range want {
		if got := h.Quantile(q); got != w {
			t.Errorf("q%v = %v, want %v", q, got, w)
		}
	}
}

// TestHistogramRandom compares quantiles with a sorted slice of random
// latencies spanning nanoseconds to minutes.
func TestHistogramRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var h, a, b Histogram
	var vals []time.Duration
	for i := range 20000 {
		v := time.Duration(rng.ExpFloat64() * float64(rng.Int64N(int64(time.Second))))
		vals = append(vals, v)
		h.Record(v)
		if i%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(&b)
	slices.Sort(vals)
	for _, q := range []float64{0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
		exact := vals[int(q*float64(len(vals))+0.999999)-1]
		got := h.Quantile(q)
		if got < exact || float64(got) > float64(exact)*(1+1.0/128)+1 {
			t.Errorf("q%v = %v, exact %v", q, got, exact)
		}
		if m := a.Quantile(q); m != got {
			t.Errorf("merged q%v = %v, whole %v", q, m, got)
		}
	}
	if a.Count() != h.Count() || a.Max() != h.Max() || a.Min() != h.Min() {
		t.Errorf("merge lost values")
	}
}

func TestBuckets(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		b := bucketOf(v)
		if b <= prev && v > 0 || b >= numBuckets {
			t.Fatalf("bucket of %d = %d (previous %d)", v, b, prev)
		}
		if hi := bucketHigh(b); hi < v || (b > 0 && bucketHigh(b-1) >= v) {
			t.Fatalf("value %d in bucket %d whose range ends at %d (previous ends at %d)", v, b, hi, bucketHigh(b-1))
		}
		prev = b
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram")
	}
}
