package reload

import (
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
)

// TestDiffSeesChargeOverLimit: turning charge_over_limit on or off changes
// what is enforced, so a reload that does only that reports the domain as
// changed.
func TestDiffSeesChargeOverLimit(t *testing.T) {
	const base = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	cfgs := []string{base, base + "    charge_over_limit: true\n", base + "    charge_over_limit: false\n"}
	for i, a := range cfgs {
		for j, b := range cfgs {
			got := Diff(stacktest.ParseConfig(t, a), stacktest.ParseConfig(t, b)).Changed
			want := []string(nil)
			if i != j {
				want = []string{"d"}
			}
			if !slices.Equal(got, want) {
				t.Errorf("config %d → %d: changed %v, want %v", i, j, got, want)
			}
		}
	}
}
