package xds_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
	"github.com/sluice-rl/sluice/internal/xds"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// deepConf is a resource of domain whose descriptors nest depth levels,
// each with a rule.
func deepConf(domain string, depth int) *rlsconfv3.RateLimitConfig {
	var below []*rlsconfv3.RateLimitDescriptor
	for range depth {
		below = []*rlsconfv3.RateLimitDescriptor{{Key: "k", Value: "v", Descriptors: below,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}
	}
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: below}
}

// A resource nesting its descriptors 9,900 levels deep (about 100 KB on
// the wire) is NACKed, naming the depth bound, and reading it costs
// memory in proportion to its size: it was ACKed after 8 s holding 2.2 GB
// of live heap. The configuration in use stays.
func TestClientNACKsDeepConfig(t *testing.T) {
	const depth = 9900
	srv := xdstest.Start(t, xdstest.Options{})
	rec, logs, w := &recorder{}, &testenv.SyncBuffer{}, newWaits()
	startClient(t, settingsFor(srv.Addr()), rec, w, logs)
	srv.Set(t, node, "1", xdstest.PerMinute("api", "user", 10))
	srv.WaitACK(t, "1")

	deep := deepConf("deep", depth)
	size := proto.Size(deep)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	srv.Set(t, node, "2", xdstest.PerMinute("api", "user", 10), deep)
	nack := srv.WaitNACK(t, "2")
	runtime.GC()
	runtime.ReadMemStats(&after)

	want := fmt.Sprintf("descriptors nested %d levels deep or more, beyond the %d a configuration may have", descriptor.MaxDepth+1, descriptor.MaxDepth)
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, want) || !strings.Contains(msg, "RateLimitConfig 'deep'") {
		t.Errorf("NACK message %q does not name the resource and the depth bound", msg)
	}
	if got := rec.limitOf("api", "user"); got != 10 {
		t.Errorf("after the NACK: limit %d, want 10 (the last good config)", got)
	}
	// Everything the process allocated meanwhile (the server's encoding
	// too, the resend of the rejected version, the client's decoding and
	// reading) is held to a few hundred times the resource's size; the
	// quadratic reading allocated about 12 GB for it.
	allocated, live := before.TotalAlloc, int64(0)
	allocated = after.TotalAlloc - allocated
	live = int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("resource %d bytes, %d levels: allocated %d KB, live heap grew %d KB", size, depth, allocated>>10, live>>10)
	if allocated > 256<<20 || live > 32<<20 {
		t.Errorf("a %d-byte resource allocated %d MB and grew the live heap by %d MB, want at most 256 MB and 32 MB",
			size, allocated>>20, live>>20)
	}
}

// Compiling deeper and deeper resources, were there no depth bound (the
// reader's and Compile's memory, bound apart), grows in proportion to the
// depth: each doubling of the depth at most a little more than doubles
// what is allocated.
func TestCompileMemoryLinearInDepth(t *testing.T) {
	var prev uint64
	for _, depth := range []int{descriptor.MaxDepth / 4, descriptor.MaxDepth / 2, descriptor.MaxDepth} {
		confs := []*rlsconfv3.RateLimitConfig{deepConf("deep", depth)}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const rounds = 20
		for range rounds {
			if _, err := xds.Compile(confs, xds.CompileOptions{}); err != nil {
				t.Fatalf("depth %d: %v", depth, err)
			}
		}
		runtime.ReadMemStats(&after)
		per := (after.TotalAlloc - before.TotalAlloc) / rounds
		t.Logf("depth %d: %d bytes allocated per compile", depth, per)
		if prev > 0 && per > prev*5/2 {
			t.Errorf("depth %d allocates %d bytes per compile, over 2.5 times the %d of half the depth", depth, per, prev)
		}
		prev = per
	}
}
