package loadgen

import (
	"math"
	"testing"
)

func TestUniformKeys(t *testing.T) {
	k := Keys{Count: 50}.withDefaults()
	p := k.picker(1, 0)
	counts := make([]int, 50)
	const draws = 50000
	for range draws {
		n, attack := p.next()
		if n >= 50 || attack {
			t.Fatalf("key %d (attack %v) outside [0, 50)", n, attack)
		}
		counts[n]++
	}
	for i, c := range counts {
		// 1000 expected; ±25% is over 7 standard deviations.
		if c < 750 || c > 1250 {
			t.Errorf("key %d drawn %d times, want about 1000", i, c)
		}
	}
}

func TestZipfKeys(t *testing.T) {
	k := Keys{Count: 1000, Distribution: Zipf, ZipfS: 1.2}.withDefaults()
	p := k.picker(2, 3)
	counts := make([]int, 1000)
	for range 100000 {
		n, _ := p.next()
		if n >= 1000 {
			t.Fatalf("key %d outside [0, 1000)", n)
		}
		counts[n]++
	}
	// P(k) ∝ (1+k)^-s: key 0 is drawn 2^1.2 ≈ 2.3 times as often as key 1.
	if ratio := float64(counts[0]) / float64(counts[1]); math.Abs(ratio-math.Pow(2, 1.2)) > 0.25 {
		t.Errorf("count(0)/count(1) = %.2f, want about %.2f", ratio, math.Pow(2, 1.2))
	}
	if counts[0] < counts[10] || counts[10] < counts[500] {
		t.Errorf("zipf counts do not fall: %d, %d, %d", counts[0], counts[10], counts[500])
	}
}

func TestAttackShare(t *testing.T) {
	for _, share := range []float64{0, 0.05, 0.3, 1} {
		k := Keys{Count: 10000, AttackKeys: 4, AttackShare: share}.withDefaults()
		p := k.picker(3, 1)
		const draws = 20000
		attacks := 0
		for range draws {
			n, attack := p.next()
			if attack != (n >= 10000) || n >= 10004 {
				t.Fatalf("key %d flagged attack=%v", n, attack)
			}
			if attack {
				attacks++
			}
		}
		// Binomial sd ≤ 71 draws; allow ±400 (over 5 sd). Seeded: deterministic.
		if got := float64(attacks); math.Abs(got-share*draws) > 400 {
			t.Errorf("share %v: %d of %d draws on attack keys", share, attacks, draws)
		}
	}
}

// The same seed and worker give the same sequence; another worker another.
func TestPickerSeeded(t *testing.T) {
	k := Keys{Count: 1 << 20, AttackKeys: 3, AttackShare: 0.2}.withDefaults()
	a, b, c := k.picker(9, 0), k.picker(9, 0), k.picker(9, 1)
	same, differ := true, false
	for range 100 {
		x, _ := a.next()
		y, _ := b.next()
		z, _ := c.next()
		same = same && x == y
		differ = differ || x != z
	}
	if !same || !differ {
		t.Errorf("same seed same worker equal: %v; other worker differs: %v", same, differ)
	}
}

func TestParseDistribution(t *testing.T) {
	for s, want := range map[string]Distribution{"": Uniform, "uniform": Uniform, "zipf": Zipf} {
		if d, err := ParseDistribution(s); err != nil || d != want || (s != "" && d.String() != s) {
			t.Errorf("%q: %v, %v", s, d, err)
		}
	}
	if _, err := ParseDistribution("pareto"); err == nil {
		t.Error("pareto accepted")
	}
}
