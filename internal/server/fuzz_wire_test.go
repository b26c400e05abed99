package server

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// wireFuzzYAML has every kind of node the service treats differently.
const wireFuzzYAML = `
domain: d
descriptors:
  - key: a
    rate_limits:
      - {name: n1, unit: second, requests_per_unit: 3}
      - {name: n2, algorithm: token_bucket, unit: minute, requests_per_unit: 10, burst: 5}
      - {algorithm: sliding_window, unit: hour, requests_per_unit: 50}
      - {algorithm: sliding_log, unit: second, requests_per_unit: 2}
      - {algorithm: gcra, unit: day, requests_per_unit: 2, burst: 1}
    metadata: {x: 1}
    descriptors:
      - key: b
        value: v*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: n1}]}
  - key: b
    shadow_mode: true
    quota_mode: true
    rate_limit: {name: n3, algorithm: leaky_bucket, unit: second, requests_per_unit: 1}
  - key: c
    rate_limit: {unlimited: true}
  - key: z
    value: "0"
    rate_limit: {unit: week, requests_per_unit: 0}
`

// FuzzServeWire runs arbitrary bytes through the whole request path but
// the network: the server's codec decodes them, the service decides on the
// memory backend, and the response is encoded for gRPC and for /json.
// Whatever the bytes, the result is a decoding error, InvalidArgument, or
// a response with one status per descriptor that encodes both ways.
func FuzzServeWire(f *testing.F) {
	for _, wire := range [][]byte{
		mustMarshal(f, request("d", "a", "x")),
		mustMarshal(f, request("d", "a", "x", "b", "v1")),
		mustMarshal(f, request("d", "b", "\xef\xbf\xbd")),
		[]byte("\n\x01d\x12\x08\n\x06\n\x01a\x12\x01\xff"),
		[]byte("\n\x01d\x12\x0c\n\x03\n\x01c\x12\x05\x08\x03\x10\x02\x18\x01"),
	} {
		f.Add(wire)
	}
	cfg, err := descriptor.Parse("fuzz.yaml", []byte(wireFuzzYAML))
	if err != nil {
		f.Fatal(err)
	}
	c, err := descriptor.NewConfig(cfg...)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2027, 1, 4, 10, 0, 30, 0, time.UTC)
	mem1 := memory.New(memory.Options{Now: func() time.Time { return now }, SweepInterval: -1})
	defer mem1.Close()
	svc := service.New(service.Options{
		Backend:         mem1,
		Headers:         service.HeaderOptions{Enabled: true, IETF: true, RetryAfter: true},
		DynamicMetadata: true,
		Logger:          quietLogger(),
	})
	svc.SetConfig(c)
	cd := newCodec()

	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlsv3.RateLimitRequest
		if err := cd.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &req); err != nil {
			return // gRPC answers Internal: the bytes are not a protobuf message
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || resp != nil {
				t.Fatalf("request %q: (%v, %v), want a response or InvalidArgument", data, resp, err)
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.Descriptors) {
			t.Fatalf("request %q: %d statuses for %d descriptors", data, len(resp.GetStatuses()), len(req.Descriptors))
		}
		out, err := cd.Marshal(resp)
		if err != nil {
			t.Fatalf("request %q: response does not encode: %v", data, err)
		}
		out.Free()
		if _, err := protojson.Marshal(resp); err != nil {
			t.Fatalf("request %q: response does not encode as JSON: %v", data, err)
		}
	})
}

func mustMarshal(f *testing.F, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}
