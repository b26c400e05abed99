package service

import (
	"context"
	"testing"
)

// BenchmarkShouldRateLimit measures one request with one descriptor on
// the memory backend (headers and metadata off, as by default). Run with
// -benchmem to see allocations.
func BenchmarkShouldRateLimit(b *testing.B) {
	h := newHarness(b, Options{}, `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4000000000}
`)
	req := rq("bench", d("user", "alice"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.svc.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
