package service

import (
	"strings"
	"testing"
)

// TestLongValueDecided is the regression test for the entry length bound
// being reachable by a client: with 4096 bytes, a request whose header
// value (say x-api-key) was 5000 bytes long got InvalidArgument, which
// Envoy's default failure_mode_deny=false lets through, so lengthening the
// header skipped the limit. Values as long as Envoy forwards by default
// (60 KiB of headers) are now decided, each on its own counter.
func TestLongValueDecided(t *testing.T) {
	h := newHarness(t, Options{}, "domain: d\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	long := strings.Repeat("k", 60<<10)
	expect(t, h.call(t, rq("d", d("api_key", long+"1"))), OK, "OK 1/HOUR rem=0 reset=1h0m0s")
	expect(t, h.call(t, rq("d", d("api_key", long+"1"))), OVER, "OVER_LIMIT 1/HOUR rem=0 reset=1h0m0s")
	expect(t, h.call(t, rq("d", d("api_key", long+"2"))), OK, "OK 1/HOUR rem=0 reset=1h0m0s")
}
