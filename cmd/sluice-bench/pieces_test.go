package main

import (
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/pkg/identity"
)

// BenchmarkIdentityEncode measures the identity of a one-entry descriptor
// (remote_address, as in the load runs) and of a two-entry one. It lives
// here because docs/benchmarks.md reports it and pkg/identity has no
// benchmark of its own.
func BenchmarkIdentityEncode(b *testing.B) {
	for _, tc := range []struct {
		name    string
		entries []identity.Entry
	}{
		{"one-entry", []identity.Entry{{Key: "remote_address", Value: "10.0.39.15"}}},
		{"two-entries", []identity.Entry{{Key: "user", Value: "id" + strconv.Itoa(12345)}, {Key: "path", Value: "/api/ocr"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if identity.Encode("bench", tc.entries) == "" {
					b.Fatal("empty identity")
				}
			}
		})
	}
}
