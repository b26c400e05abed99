package reliability

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// hostileYAML limits every user to 5 per hour, and gives a key made of
// separators and braces a limit too, so that hostile keys reach a backend.
const hostileYAML = `
domain: hostile
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: "we|ird=key{}%#"
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: multi
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 20}
      - {name: hourly, unit: hour, requests_per_unit: 5}
      - {name: log, algorithm: sliding_log, unit: minute, requests_per_unit: 50}
`

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

// caller sends one request through the stack's gRPC client.
type caller func(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)

// hostileCase is one hostile request (or short sequence). Either code is
// not OK and the call must fail with it and a message containing msg, or
// check inspects the response.
type hostileCase struct {
	name  string
	req   func(tag string) *rlsv3.RateLimitRequest
	code  codes.Code
	msg   string
	check func(t *testing.T, tag string, resp *rlsv3.RateLimitResponse, call caller)
}

// manyDescriptors is a request of n one-entry descriptors, each its own
// user.
func manyDescriptors(tag string, n int) *rlsv3.RateLimitRequest {
	r := rq("hostile")
	for i := range n {
		r.Descriptors = append(r.Descriptors, desc("user", fmt.Sprintf("%s-%d", tag, i)))
	}
	return r
}

// users is a request of one descriptor per value, all of key.
func users(key string, values ...string) *rlsv3.RateLimitRequest {
	r := rq("hostile")
	for _, v := range values {
		r.Descriptors = append(r.Descriptors, desc(key, v))
	}
	return r
}

// wantStatuses checks the overall code and each status's code and
// limit_remaining.
func wantStatuses(t *testing.T, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, code rlsv3.RateLimitResponse_Code, remaining uint32) {
	t.Helper()
	if resp.GetOverallCode() != overall {
		t.Fatalf("overall code %v, want %v", resp.GetOverallCode(), overall)
	}
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != code || st.GetLimitRemaining() != remaining {
			t.Fatalf("status %d: %v remaining %d, want %v remaining %d (two descriptors share a counter?)",
				i, st.GetCode(), st.GetLimitRemaining(), code, remaining)
		}
	}
}

// negative marks d is_negative_hits: its cost is a refund.
func negative(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.IsNegativeHits = true
	return d
}

// distinct checks that every status of a first request for distinct values
// reports its own fresh counter: 4 of 5 left.
func distinct(t *testing.T, _ string, resp *rlsv3.RateLimitResponse, _ caller) {
	t.Helper()
	wantStatuses(t, resp, OK, OK, 4)
}

// invalidDescriptor checks the answer to a request whose one descriptor is
// malformed: that descriptor is OVER_LIMIT, so the request is denied
// rather than failed (a failed call is one Envoy lets through unlimited).
func invalidDescriptor(t *testing.T, _ string, resp *rlsv3.RateLimitResponse, _ caller) {
	t.Helper()
	wantStatuses(t, resp, OVER, OVER, 0)
	if cl := resp.Statuses[0].GetCurrentLimit(); cl != nil {
		t.Fatalf("invalid descriptor reports the limit %v, want none", cl)
	}
}

// override returns a descriptor for user=tag with a limit override.
func override(tag string, rpu uint32, unit typev3.RateLimitUnit, mult uint32) *rlv3.RateLimitDescriptor {
	d := desc("user", tag)
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult != 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return d
}

// everyDecided checks that each of n descriptors has a status of its own,
// OK with 4 of 5 left.
func everyDecided(n int) func(*testing.T, string, *rlsv3.RateLimitResponse, caller) {
	return func(t *testing.T, _ string, resp *rlsv3.RateLimitResponse, _ caller) {
		t.Helper()
		if len(resp.Statuses) != n {
			t.Fatalf("%d statuses, want %d", len(resp.Statuses), n)
		}
		wantStatuses(t, resp, OK, OK, 4)
	}
}

// oneYear is the longest period a limit override is decided with: no
// override's reset may exceed it.
const oneYear = 365 * 24 * time.Hour

// decidedPerYear checks a limit override longer than a year: decided, and
// echoed, per YEAR, admitted with remaining left, resetting within a year.
func decidedPerYear(remaining uint32) func(*testing.T, string, *rlsv3.RateLimitResponse, caller) {
	return func(t *testing.T, _ string, resp *rlsv3.RateLimitResponse, _ caller) {
		t.Helper()
		wantStatuses(t, resp, OK, OK, remaining)
		st := resp.Statuses[0]
		if cl := st.CurrentLimit; cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_YEAR || cl.GetUnitMultiplier() != nil {
			t.Fatalf("current limit %v, want per YEAR", cl)
		}
		if r := st.DurationUntilReset.AsDuration(); r <= 0 || r > oneYear {
			t.Fatalf("reset %v, want within (0, 365 days]", r)
		}
	}
}

var hostileCases = []hostileCase{
	{
		name: "10000 descriptors",
		req:  func(tag string) *rlsv3.RateLimitRequest { return manyDescriptors(tag, 10000) },
		code: codes.InvalidArgument, msg: "10000 descriptors, more than the limit of 8192 (SLUICE_MAX_DESCRIPTORS)",
	},
	{
		name: "8193 descriptors",
		req:  func(tag string) *rlsv3.RateLimitRequest { return manyDescriptors(tag, 8193) },
		code: codes.InvalidArgument, msg: "more than the limit of 8192",
	},
	{
		name:  "64 descriptors are decided",
		req:   func(tag string) *rlsv3.RateLimitRequest { return manyDescriptors(tag, 64) },
		check: everyDecided(64),
	},
	{
		// Envoy Gateway sends a descriptor per matching rule, up to 512
		// rules (more with inverted method conditions) in one call.
		name:  "8192 descriptors are decided",
		req:   func(tag string) *rlsv3.RateLimitRequest { return manyDescriptors(tag, 8192) },
		check: everyDecided(8192),
	},
	{
		name: "1000 entries in one descriptor",
		req: func(tag string) *rlsv3.RateLimitRequest {
			d := &rlv3.RateLimitDescriptor{}
			for i := range 1000 {
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "user", Value: fmt.Sprint(tag, i)})
			}
			return rq("hostile", d)
		},
		check: invalidDescriptor,
	},
	{
		// Within the request bound (4 MiB, gRPC's default): the value
		// alone is over its bound, so its descriptor is answered
		// OVER_LIMIT.
		name: "1 MiB value",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", desc("user", tag+strings.Repeat("v", mib)))
		},
		check: invalidDescriptor,
	},
	{
		name: "5 MiB value",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", desc("user", tag+strings.Repeat("v", 5*mib)))
		},
		// gRPC's own bound on a request message, before sluice sees it.
		code: codes.ResourceExhausted, msg: "vs. 4194304",
	},
	{
		name: "1 MiB domain",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq(strings.Repeat("d", mib), desc("user", tag))
		},
		code: codes.InvalidArgument, msg: "rate limit domain is 1048576 bytes long, more than the limit of 65536",
	},
	{
		name: "5 MiB domain",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq(strings.Repeat("d", 5*mib), desc("user", tag))
		},
		code: codes.ResourceExhausted, msg: "vs. 4194304",
	},
	{
		name: "65537-byte value",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", desc("user", tag+strings.Repeat("v", 65537-len(tag))))
		},
		check: invalidDescriptor,
	},
	{
		name: "65537-byte key",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", desc(strings.Repeat("k", 65537), tag))
		},
		check: invalidDescriptor,
	},
	{
		// Envoy forwards header values up to its 60 KiB header limit; an
		// error here would let the request through Envoy unlimited.
		name: "60 KiB values are decided, each its own counter",
		req: func(tag string) *rlsv3.RateLimitRequest {
			long := strings.Repeat("v", 60<<10)
			return users("user", tag+"a"+long, tag+"b"+long, tag+long+"a", tag+long+"b")
		},
		check: distinct,
	},
	{
		name: "invalid UTF-8 values, each its own counter",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return users("user", tag+"\xff", tag+"\xfe", tag+"\xc3", tag+"\xc3\xa9", tag+"\xed\xa0\x80", tag+"\xef\xbf\xbd")
		},
		check: distinct,
	},
	{
		name: "invalid UTF-8 key and domain",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile\xff", desc("us\xffer", tag))
		},
		check: func(t *testing.T, _ string, resp *rlsv3.RateLimitResponse, _ caller) {
			// An unknown domain: no limit, answered OK (as the reference does).
			wantStatuses(t, resp, OK, OK, 0)
		},
	},
	{
		name: "NUL bytes, each its own counter",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return users("user", tag, tag+"\x00", "\x00"+tag, tag+"\x00\x00", tag+"\x00x")
		},
		check: distinct,
	},
	{
		name: "braces and separators in values, each its own counter",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return users("user", tag+"{a}", tag+"%7Ba%7D", tag+"{a", tag+"a}", tag+"a", tag+"a|user=b", tag+"a=b",
				tag+"a|b", tag+"#a", tag+"%23a", tag+"}{", tag+"a:b", tag+"a\nb", tag+"a\r\nuser=b")
		},
		check: distinct,
	},
	{
		name: "braces and separators in keys",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return users("we|ird=key{}%#", tag+"1", tag+"{1}", tag+"|", tag+"=")
		},
		check: distinct,
	},
	{
		name: "hits_addend 2^64-1 is denied, charged up to 2^53, and refunded whole",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", withAddend(desc("user", tag), math.MaxUint64), withAddend(desc("multi", tag), math.MaxUint64))
		},
		check: func(t *testing.T, tag string, resp *rlsv3.RateLimitResponse, call caller) {
			// A descriptor's own hits_addend is charged when it does not
			// fit (as a response-path debit must be): denied, nothing
			// left, and the next request is denied too, with no overflow.
			wantStatuses(t, resp, OVER, OVER, 0)
			next, err := call(rq("hostile", desc("user", tag), desc("multi", tag)))
			if err != nil {
				t.Fatal(err)
			}
			wantStatuses(t, next, OVER, OVER, 0)
			// The same huge refund gives back exactly what was charged.
			back, err := call(rq("hostile", negative(withAddend(desc("user", tag), math.MaxUint64)), negative(withAddend(desc("multi", tag), math.MaxUint64))))
			if err != nil {
				t.Fatal(err)
			}
			wantStatuses(t, back, OK, OK, 5)
			next, err = call(rq("hostile", desc("user", tag), desc("multi", tag)))
			if err != nil {
				t.Fatal(err)
			}
			wantStatuses(t, next, OK, OK, 4) // the capped charge was taken back whole
		},
	},
	{
		name: "request hits_addend 2^32-1 is denied and consumes nothing",
		req: func(tag string) *rlsv3.RateLimitRequest {
			r := rq("hostile", desc("user", tag))
			r.HitsAddend = math.MaxUint32
			return r
		},
		check: func(t *testing.T, tag string, resp *rlsv3.RateLimitResponse, call caller) {
			wantStatuses(t, resp, OVER, OVER, 5)
			next, err := call(rq("hostile", desc("user", tag)))
			if err != nil {
				t.Fatal(err)
			}
			wantStatuses(t, next, OK, OK, 4)
		},
	},
	{
		name: "refund of 2^64-1 never exceeds a whole quota",
		req: func(tag string) *rlsv3.RateLimitRequest {
			d := withAddend(desc("user", tag), math.MaxUint64)
			d.IsNegativeHits = true
			return rq("hostile", d)
		},
		check: func(t *testing.T, tag string, resp *rlsv3.RateLimitResponse, call caller) {
			wantStatuses(t, resp, OK, OK, 5)
			for i := range 6 {
				next, err := call(rq("hostile", desc("user", tag)))
				if err != nil {
					t.Fatal(err)
				}
				want, rem := OK, uint32(4-i)
				if i == 5 {
					want, rem = OVER, 0
				}
				wantStatuses(t, next, want, want, rem) // still exactly 5 per hour
			}
		},
	},
	{
		name: "override with unit 0",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", override(tag, 10, typev3.RateLimitUnit_UNKNOWN, 0))
		},
		check: invalidDescriptor,
	},
	{
		name: "override with unit 2^31-1",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", override(tag, 10, typev3.RateLimitUnit(math.MaxInt32), 0))
		},
		check: invalidDescriptor,
	},
	{
		name: "override with multiplier 2^32-1",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", override(tag, 1, typev3.RateLimitUnit_YEAR, math.MaxUint32))
		},
		check: decidedPerYear(0),
	},
	{
		name: "override with multiplier 100 years",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", override(tag, 1, typev3.RateLimitUnit_YEAR, 100))
		},
		check: decidedPerYear(0),
	},
	{
		name: "override with requests_per_unit 2^32-1 and a second multiplier of 2^32-1",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", withAddend(override(tag, math.MaxUint32, typev3.RateLimitUnit_SECOND, math.MaxUint32), math.MaxUint32))
		},
		check: decidedPerYear(0),
	},
	{
		name: "override with requests_per_unit 0",
		req: func(tag string) *rlsv3.RateLimitRequest {
			return rq("hostile", override(tag, 0, typev3.RateLimitUnit_SECOND, 0))
		},
		check: func(t *testing.T, _ string, resp *rlsv3.RateLimitResponse, _ caller) {
			wantStatuses(t, resp, OVER, OVER, 0)
		},
	},
	{
		name:  "empty key",
		req:   func(tag string) *rlsv3.RateLimitRequest { return rq("hostile", desc("", tag)) },
		check: invalidDescriptor,
	},
	{
		name: "empty domain",
		req:  func(tag string) *rlsv3.RateLimitRequest { return rq("", desc("user", tag)) },
		code: codes.InvalidArgument, msg: "domain must not be empty",
	},
	{
		name: "no descriptors",
		req:  func(string) *rlsv3.RateLimitRequest { return rq("hostile") },
		code: codes.InvalidArgument, msg: "descriptor list must not be empty",
	},
}

// runHostile sends every hostile case through st and checks, for each,
// the answer, that the live heap did not grow by more than a generous
// bound, and that a normal request is still served afterwards.
func runHostile(t *testing.T, st *stack) {
	call := func(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rawCall(ctx, st, req)
	}
	// Warm up: the first call sets up the connection and the pools.
	if _, err := call(rq("hostile", desc("user", "warm-up"))); err != nil {
		t.Fatal(err)
	}
	for i, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			tag := fmt.Sprintf("c%d-", i)
			before := heapAfterGC()
			resp, err := call(tc.req(tag))
			switch {
			case tc.code != codes.OK:
				s, _ := status.FromError(err)
				if s.Code() != tc.code || !strings.Contains(s.Message(), tc.msg) {
					t.Fatalf("got (%v, %v), want %v containing %q", resp, err, tc.code, tc.msg)
				}
			case err != nil:
				t.Fatalf("got %v, want a response", err)
			default:
				tc.check(t, tag, resp, call)
			}
			after := heapAfterGC()
			const bound = 16 * mib
			if after > before+bound {
				t.Errorf("live heap grew from %d to %d bytes (more than %d)", before, after, bound)
			}
			t.Logf("live heap %.1f MiB before, %.1f MiB after", float64(before)/mib, float64(after)/mib)

			normal, err := call(rq("hostile", desc("user", tag+"normal")))
			if err != nil {
				t.Fatalf("normal request after the hostile one: %v", err)
			}
			wantStatuses(t, normal, OK, OK, 4)
		})
	}
}

// hostileOptions turn on everything that echoes the request back
// (dynamic metadata) or formats the response (headers).
func hostileOptions(b backend.Backend) service.Options {
	return service.Options{
		Backend:         b,
		Headers:         service.HeaderOptions{Enabled: true, IETF: true, RetryAfter: true},
		DynamicMetadata: true,
	}
}

// TestHostileMemory sends every hostile request through the gRPC server
// on the memory backend.
func TestHostileMemory(t *testing.T) {
	st := startStack(t, hostileOptions(newMemory()), hostileYAML)
	runHostile(t, st)
}

// TestHostileRedis sends the same requests with a Redis backend: the key
// schema must keep every hostile value apart and within Redis's reach.
func TestHostileRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	be := newRedis(t, redis.Options{URL: srv.Addr(), KeyPrefix: "hostile:"})
	st := startStack(t, hostileOptions(be), hostileYAML)
	runHostile(t, st)
	// Every key sluice wrote is bounded, whatever the request carried.
	ctx := context.Background()
	keys, err := srv.Client().Keys(ctx, "hostile:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	longest := 0
	for _, k := range keys {
		longest = max(longest, len(k))
	}
	if len(keys) == 0 || longest > 256 {
		t.Fatalf("%d keys, longest %d bytes: want some, none longer than 256", len(keys), longest)
	}
	t.Logf("%d keys in Redis, the longest %d bytes", len(keys), longest)
}

// TestHostileJSON sends hostile bodies to the HTTP /json endpoint: each
// gets a 4xx naming what is wrong, and a normal request is served after.
func TestHostileJSON(t *testing.T) {
	st := startStack(t, hostileOptions(newMemory()), hostileYAML)
	post := func(body string) (int, string) {
		return testenv.HTTPPost(t, "http://"+st.Server.HTTPAddr()+"/json", body)
	}
	many := `{"domain":"hostile","descriptors":[` + strings.TrimSuffix(strings.Repeat(`{"entries":[{"key":"user","value":"x"}]},`, 10000), ",") + `]}`
	tests := []struct {
		name, body string
		code       int
		msg        string
	}{
		{"5 MiB body", `{"domain":"` + strings.Repeat("d", 5*mib) + `"}`, http.StatusRequestEntityTooLarge, "larger than 4194304 bytes"},
		{"not JSON", "\x00\xff{", http.StatusBadRequest, "not a proto3 JSON RateLimitRequest"},
		{"unknown field", `{"domain":"hostile","bogus":1}`, http.StatusBadRequest, "bogus"},
		{"10000 descriptors", many, http.StatusBadRequest, "10000 descriptors, more than the limit of 8192"},
		{"hits_addend 2^64-1", `{"domain":"hostile","descriptors":[{"entries":[{"key":"user","value":"j"}],"hitsAddend":"18446744073709551615"}]}`, http.StatusTooManyRequests, "OVER_LIMIT"},
		{"invalid UTF-8 escape", `{"domain":"hostile","descriptors":[{"entries":[{"key":"user","value":"\udcff"}]}]}`, http.StatusBadRequest, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := heapAfterGC()
			code, body := post(tt.body)
			if code != tt.code || !strings.Contains(body, tt.msg) {
				t.Fatalf("got %d %q, want %d containing %q", code, firstWords(body, 20), tt.code, tt.msg)
			}
			if after := heapAfterGC(); after > before+16*mib {
				t.Errorf("live heap grew from %d to %d bytes", before, after)
			}
			code, body = post(`{"domain":"hostile","descriptors":[{"entries":[{"key":"user","value":"json-` + tt.name + `"}]}]}`)
			if code != http.StatusOK {
				t.Fatalf("normal request after: %d %s", code, body)
			}
		})
	}
}
