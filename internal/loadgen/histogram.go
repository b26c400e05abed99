package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: every power of two is split into
// 2^subBits buckets, so a recorded value is known to within 1/2^subBits
// (0.8%) of itself.
const subBits = 7

const (
	subCount   = 1 << subBits
	numBuckets = (64 - subBits + 1) * subCount
)

// Histogram records durations in log-linear buckets, HDR style: values
// below 2^subBits ns exactly, larger ones to within 0.8%, with no
// allocation per value and a fixed size (about 60 KiB). The zero Histogram
// is empty and ready to use. It is not safe for concurrent use: give each
// worker its own and Merge them.
type Histogram struct {
	counts   [numBuckets]uint64
	total    uint64
	sum      float64 // ns, for the mean
	min, max time.Duration
}

// bucketOf returns the bucket holding v ns (v ≥ 0).
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - 1 // 2^e ≤ v < 2^(e+1), e ≥ subBits
	sub := v>>(e-subBits) - subCount
	return (e-subBits+1)*subCount + int(sub)
}

// bucketHigh is the largest value bucket b holds.
func bucketHigh(b int) uint64 {
	if b < subCount {
		return uint64(b)
	}
	e := b/subCount + subBits - 1
	sub := uint64(b % subCount)
	low := (subCount + sub) << (e - subBits)
	return low + (1 << (e - subBits)) - 1
}

// Record adds one duration. Negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	if h.total == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.total++
	h.sum += float64(d)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.total += o.total
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest value recorded, exactly.
func (h *Histogram) Max() time.Duration { return h.max }

// Min is the smallest value recorded, exactly.
func (h *Histogram) Min() time.Duration { return h.min }

// Mean is the average value recorded.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.total)))
}

// Quantile returns the value at quantile q (0 < q ≤ 1): the smallest
// bucket bound below or at which at least q of the values lie, so at most
// 0.8% above the true value and never above Max. It returns 0 for an empty
// histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(1, min(rank, h.total))
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketHigh(b)), h.max)
		}
	}
	return h.max
}
