package service

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fuzzReader hands out fuzz bytes; exhausted, it returns zeros.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) str() string {
	n := int(r.byte() % 8)
	if n > len(r.b) {
		n = len(r.b)
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

var fuzzKeys = []string{"a", "b", "c", "z", ""}

// request builds an arbitrary request from the fuzz bytes.
func (r *fuzzReader) request() *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{HitsAddend: uint32(r.byte()) << (r.byte() % 32)}
	switch r.byte() % 4 {
	case 0:
		req.Domain = "d"
	case 1:
		req.Domain = r.str()
	case 2:
		req.Domain = "d"
	}
	n := int(r.byte() % 6)
	for range n {
		flags := r.byte()
		if flags == 255 {
			req.Descriptors = append(req.Descriptors, nil)
			continue
		}
		d := &rlv3.RateLimitDescriptor{IsNegativeHits: flags&1 != 0}
		if flags&2 != 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(r.byte()) << (r.byte() % 64))
		}
		if flags&4 != 0 {
			d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: uint32(r.byte()),
				Unit:            typev3.RateLimitUnit(int32(r.byte()%10) - 1),
			}
			if flags&8 != 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(r.byte()) << (r.byte() % 32))
			}
		}
		entries := int(r.byte() % 4)
		for range entries {
			if r.byte() == 255 {
				d.Entries = append(d.Entries, nil)
				continue
			}
			k := fuzzKeys[int(r.byte())%len(fuzzKeys)]
			if k == "" {
				k = r.str()
			}
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: r.str()})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	if r.byte() == 7 {
		return nil
	}
	return req
}

func FuzzShouldRateLimit(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 2, 0, 1, 0, 1, 'x', 0, 3, 1, 0, 1, 'v'})
	f.Add([]byte{1, 3, 0, 3, 4, 7, 9, 2, 5, 0, 2, 1, 'q', 3, 0, 0, 1, 'y', 3, 1})
	f.Add([]byte{255, 31, 2, 5, 255, 6, 200, 63, 2, 0, 1, 1, 'v', 14, 3, 7, 5, 8, 1, 0, 2, 1, 1, 'v'})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t, Options{
			Headers:         HeaderOptions{Enabled: true, IETF: true, RetryAfter: true},
			DynamicMetadata: true,
			Bounds:          RequestBounds{MaxDescriptors: 4, MaxEntries: 2, MaxEntryLen: 6},
		}, testenv.EveryNodeYAML)
		r := &fuzzReader{b: data}
		for range 3 {
			req := r.request()
			resp, err := h.svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				st, ok := status.FromError(err)
				if !ok || st.Code() != codes.InvalidArgument || resp != nil {
					t.Fatalf("request %v: got (%v, %v), want a response or InvalidArgument", req, resp, err)
				}
				continue
			}
			if resp == nil || len(resp.Statuses) != len(req.Descriptors) {
				t.Fatalf("request %v: response %v", req, resp)
			}
			for _, st := range resp.Statuses {
				if st == nil || (st.Code != OK && st.Code != OVER) {
					t.Fatalf("request %v: status %v", req, st)
				}
			}
			h.clock.Advance(1 << (r.byte() % 40))
		}
	})
}
