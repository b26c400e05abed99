package loadgen

import (
	"fmt"
	"math/rand/v2"
)

// Distribution is how requests spread over the keys.
type Distribution int

// The distributions.
const (
	// Uniform picks each of the keys with equal probability.
	Uniform Distribution = iota
	// Zipf picks key k with probability proportional to (1+k)^-s: key 0 is
	// the most frequent.
	Zipf
)

// String returns "uniform" or "zipf".
func (d Distribution) String() string {
	if d == Zipf {
		return "zipf"
	}
	return "uniform"
}

// ParseDistribution parses "uniform" or "zipf".
func ParseDistribution(s string) (Distribution, error) {
	switch s {
	case "uniform", "":
		return Uniform, nil
	case "zipf":
		return Zipf, nil
	}
	return 0, fmt.Errorf("unknown key distribution %q (want uniform or zipf)", s)
}

// Keys says which key number each request uses. Normal keys are numbered
// 0..Count-1; attack keys Count..Count+AttackKeys-1, so they never collide.
type Keys struct {
	// Count is the number of normal keys (K). 0 means 1.
	Count int
	// Distribution spreads requests over the normal keys.
	Distribution Distribution
	// ZipfS is the Zipf exponent s (> 1). 0 means 1.1.
	ZipfS float64
	// AttackKeys is the number of hot keys (A) that receive AttackShare of
	// all requests, uniformly.
	AttackKeys int
	// AttackShare is the fraction of requests sent to the attack keys, in
	// [0, 1].
	AttackShare float64
}

func (k Keys) withDefaults() Keys {
	if k.Count <= 0 {
		k.Count = 1
	}
	if k.ZipfS == 0 {
		k.ZipfS = 1.1
	}
	return k
}

func (k Keys) validate() error {
	switch {
	case k.Distribution == Zipf && !(k.ZipfS > 1):
		return fmt.Errorf("zipf exponent s must be > 1, got %v", k.ZipfS)
	case !(k.AttackShare >= 0 && k.AttackShare <= 1):
		return fmt.Errorf("attack share must be in [0, 1], got %v", k.AttackShare)
	case k.AttackShare > 0 && k.AttackKeys <= 0:
		return fmt.Errorf("an attack share of %v needs at least one attack key", k.AttackShare)
	case k.AttackKeys < 0:
		return fmt.Errorf("attack keys must be ≥ 0, got %d", k.AttackKeys)
	}
	return nil
}

// total is the number of distinct key numbers.
func (k Keys) total() int { return k.Count + k.AttackKeys }

// picker draws key numbers. Each worker has its own, seeded from the run's
// seed and the worker's index, so a run is reproducible.
type picker struct {
	keys Keys
	rng  *rand.Rand
	zipf *rand.Zipf
}

func (k Keys) picker(seed uint64, worker int) *picker {
	p := &picker{keys: k, rng: rand.New(rand.NewPCG(seed, uint64(worker)))}
	if k.Distribution == Zipf {
		p.zipf = rand.NewZipf(p.rng, k.ZipfS, 1, uint64(k.Count-1))
	}
	return p
}

// next returns the key number of the next request and whether it is an
// attack key.
func (p *picker) next() (uint64, bool) {
	k := p.keys
	if k.AttackShare > 0 && p.rng.Float64() < k.AttackShare {
		return uint64(k.Count + p.rng.IntN(k.AttackKeys)), true
	}
	if p.zipf != nil {
		return p.zipf.Uint64(), false
	}
	return uint64(p.rng.IntN(k.Count)), false
}
