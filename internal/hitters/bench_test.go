package hitters

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// BenchmarkRecord is the cost of one Record: a decided descriptor counted
// in both windows, and, when denied, counted again as a denial.
//
//   - uniform: 10,000 distinct descriptors chosen uniformly, none denied
//     (nearly every count takes over a summary's smallest counter);
//   - zipf: 10,000 distinct descriptors, zipf-skewed (s = 1.1), none
//     denied;
//   - hot: eight descriptors, none denied (every count finds its counter);
//   - denials: 10,000 distinct descriptors, one in four denied by the
//     one rule decided (hits and denials share a key);
//   - denials-two-rules: as denials, with two rules decided and the
//     denial under one of them (hits and denials have different keys);
//   - parallel: uniform, from GOMAXPROCS goroutines.
func BenchmarkRecord(b *testing.B) {
	const distinct = 10_000
	users := make([][]descriptor.Entry, distinct)
	for i := range users {
		users[i] = []descriptor.Entry{{Key: "user", Value: "user-" + strconv.Itoa(i)}}
	}
	// A fixed pseudo-random order, so that every run sees the same stream
	// and the generator costs nothing inside the loop.
	order := make([]int, 1<<16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range order {
		order[i] = rng.IntN(distinct)
	}
	zipf := make([]int, len(order))
	z := rand.NewZipf(rng, 1.1, 1, distinct-1)
	for i := range zipf {
		zipf[i] = int(z.Uint64())
	}
	type bench struct {
		name     string
		keys     int // descriptors used: the first keys of users
		rules    string
		binding  string
		denyEach int // every denyEach-th Record is a denial; 0: none
		parallel bool
		zipf     bool // draw from the zipf order instead of the uniform one
	}
	for _, bc := range []bench{
		{name: "uniform", keys: distinct, rules: "per_user"},
		{name: "zipf", keys: distinct, rules: "per_user", zipf: true},
		{name: "hot", keys: 8, rules: "per_user"},
		{name: "denials", keys: distinct, rules: "per_user", binding: "per_user", denyEach: 4},
		{name: "denials-two-rules", keys: distinct, rules: "per_user+daily", binding: "per_user", denyEach: 4},
		{name: "parallel", keys: distinct, rules: "per_user", parallel: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr := New(Options{})
			draw := order
			if bc.zipf {
				draw = zipf
			}
			record := func(i int) {
				denied := bc.denyEach > 0 && i%bc.denyEach == 0
				tr.Record("api", users[draw[i&(len(draw)-1)]%bc.keys], bc.rules, 1, denied, bc.binding, time.Second)
			}
			b.ReportAllocs()
			if bc.parallel {
				b.RunParallel(func(pb *testing.PB) {
					i := rand.IntN(len(order))
					for pb.Next() {
						record(i)
						i++
					}
				})
				return
			}
			for i := 0; b.Loop(); i++ {
				record(i)
			}
		})
	}
}
