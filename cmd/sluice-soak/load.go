package main

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// soakConfig mixes every algorithm, nested descriptors, several rules per
// descriptor, unlimited values, and windows from a second to an hour, so
// that state is created and expires all the time.
const soakConfig = `domain: soak
descriptors:
  - key: user
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 10}
      - {name: minute, algorithm: sliding_window, unit: minute, requests_per_unit: 100}
      - {name: hour, unit: hour, requests_per_unit: 1000}
    descriptors:
      - key: path
        rate_limit: {algorithm: sliding_log, unit: second, requests_per_unit: 3}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: tenant
    rate_limits:
      - {algorithm: gcra, unit: second, requests_per_unit: 20, burst: 10}
      - {algorithm: leaky_bucket, unit: minute, requests_per_unit: 600}
  - key: public
    rate_limit: {unlimited: true}
`

// Key spaces: users and tenants recur (their state lives on), addresses
// churn (a new one mostly, each kept a second or two). A third of the
// user calls go to a few hot users, and the tenants are few, so that some
// calls are denied.
const (
	soakUsers     = 5000
	soakHotUsers  = 20
	soakPaths     = 20
	soakAddresses = 1_000_000
	soakTenants   = 10
)

// nextRequest draws one request of the mix from r.
func nextRequest(r *rand.Rand) *rlsv3.RateLimitRequest {
	d := func(kv ...string) *rlv3.RateLimitDescriptor {
		out := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	user := "u" + strconv.Itoa(r.IntN(soakUsers))
	if r.IntN(3) == 0 {
		user = "u" + strconv.Itoa(r.IntN(soakHotUsers))
	}
	req := &rlsv3.RateLimitRequest{Domain: "soak"}
	switch p := r.IntN(100); {
	case p < 40:
		req.Descriptors = append(req.Descriptors, d("user", user))
	case p < 55:
		req.Descriptors = append(req.Descriptors, d("user", user, "path", "/p"+strconv.Itoa(r.IntN(soakPaths))))
	case p < 70:
		req.Descriptors = append(req.Descriptors, d("remote_address", "10."+strconv.Itoa(r.IntN(soakAddresses))))
	case p < 80:
		x := d("tenant", "t"+strconv.Itoa(r.IntN(soakTenants)))
		x.HitsAddend = wrapperspb.UInt64(uint64(1 + r.IntN(5)))
		req.Descriptors = append(req.Descriptors, x)
	case p < 85: // a refund
		x := d("user", user)
		x.IsNegativeHits = true
		req.Descriptors = append(req.Descriptors, x)
	case p < 88: // a peek
		x := d("tenant", "t"+strconv.Itoa(r.IntN(soakTenants)))
		x.HitsAddend = wrapperspb.UInt64(0)
		req.Descriptors = append(req.Descriptors, x)
	case p < 92: // a request limit override
		x := d("user", user)
		x.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}
		req.Descriptors = append(req.Descriptors, x)
	case p < 95:
		req.Domain = "unknown"
		req.Descriptors = append(req.Descriptors, d("user", user))
	default:
		req.Descriptors = append(req.Descriptors, d("public", user))
	}
	if r.IntN(3) == 0 { // a route with two rate_limit actions
		req.Descriptors = append(req.Descriptors, d("remote_address", "10."+strconv.Itoa(r.IntN(soakAddresses))))
	}
	return req
}

// interval counts the calls of one sampling interval.
type interval struct {
	ok, over, failed atomic.Int64
	latencySum       atomic.Int64 // ns
	latencyMax       atomic.Int64 // ns
	codes            sync.Map     // codes.Code → *atomic.Int64, for failures
}

func (iv *interval) record(d time.Duration, resp *rlsv3.RateLimitResponse, err error) {
	iv.latencySum.Add(int64(d))
	for {
		m := iv.latencyMax.Load()
		if int64(d) <= m || iv.latencyMax.CompareAndSwap(m, int64(d)) {
			break
		}
	}
	switch {
	case err != nil:
		iv.failed.Add(1)
		c, _ := iv.codes.LoadOrStore(status.Code(err), new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		iv.over.Add(1)
	default:
		iv.ok.Add(1)
	}
}

// failures renders the failure codes, e.g. "Unavailable=3".
func (iv *interval) failures() map[codes.Code]int64 {
	out := map[codes.Code]int64{}
	iv.codes.Range(func(k, v any) bool {
		out[k.(codes.Code)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// loader runs the clients.
type loader struct {
	cur atomic.Pointer[interval]
	wg  sync.WaitGroup
}

// startLoader starts clients goroutines calling client until ctx is done,
// together at about rate calls per second (0: unpaced).
func startLoader(ctx context.Context, client rlsv3.RateLimitServiceClient, clients, rate int) *loader {
	l := &loader{}
	l.cur.Store(new(interval))
	var gap time.Duration
	if rate > 0 {
		gap = time.Duration(int64(time.Second) * int64(clients) / int64(rate))
	}
	for w := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			next := time.Now()
			for ctx.Err() == nil {
				req := nextRequest(r)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				start := time.Now()
				resp, err := client.ShouldRateLimit(cctx, req)
				d := time.Since(start)
				cancel()
				if ctx.Err() != nil {
					return // cut by the end of the soak, not by sluice
				}
				l.cur.Load().record(d, resp, err)
				if gap > 0 {
					next = next.Add(gap)
					if wait := time.Until(next); wait > 0 {
						select {
						case <-ctx.Done():
						case <-time.After(wait):
						}
					} else if wait < -time.Second {
						next = time.Now() // fell behind: do not burst to catch up
					}
				}
			}
		}()
	}
	return l
}

// swap starts a new interval and returns the one that ended.
func (l *loader) swap() *interval { return l.cur.Swap(new(interval)) }

// wait waits for the clients to stop (after ctx is done).
func (l *loader) wait() { l.wg.Wait() }
