package compat

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// devStopIncrement: with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, a denied
// request charges none of its descriptors in sluice.
var devStopIncrement = dev("stop-increment-refund")

// TestStopIncrementRepeatedDescriptor: a request that carries one
// descriptor three times, on a limit of 2, with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (checked against the
// incumbent's binary). The incumbent's check reads the counter once, finds
// each copy within the limit on its own, and increments all three: the
// third is denied, and the next request too. sluice decides the copies in
// turn (on Redis Cluster, charging and refunding), denies the third, and
// charges none of them, as the setting says:
// the copies it admitted report the whole limit left, and the next request
// is admitted. Two copies fit, and are charged, in both.
func TestStopIncrementRepeatedDescriptor(t *testing.T) {
	for _, v := range core {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, "fixtures/two_per_minute.yaml")
			sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
			const domain = "two-per-minute"
			three := sluicetest.Unique("three")
			resp := s.ask(t, rq(domain, d("a", three), d("a", three), d("a", three)))
			expect(t, "three copies", answerOf(resp),
				ans(over, limited(ok, 2, "MINUTE", 1), limited(ok, 2, "MINUTE", 0), limited(over, 2, "MINUTE", 0)),
				because(devStopIncrement, ans(over, limited(ok, 2, "MINUTE", 2), limited(ok, 2, "MINUTE", 2), limited(over, 2, "MINUTE", 0))))
			resp = s.ask(t, rq(domain, d("a", three)))
			expect(t, "after three copies", answerOf(resp), ans(over, limited(over, 2, "MINUTE", 0)),
				because(devStopIncrement, ans(ok, limited(ok, 2, "MINUTE", 1))))

			two := sluicetest.Unique("two")
			resp = s.ask(t, rq(domain, d("a", two), d("a", two)))
			expect(t, "two copies", answerOf(resp), ans(ok, limited(ok, 2, "MINUTE", 1), limited(ok, 2, "MINUTE", 0)))
			resp = s.ask(t, rq(domain, d("a", two)))
			expect(t, "after two copies", answerOf(resp), ans(over, limited(over, 2, "MINUTE", 0)))
		})
	}
}
