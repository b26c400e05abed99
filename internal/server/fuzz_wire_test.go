package server

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
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
	cfg, err := descriptor.Parse("fuzz.yaml", []byte(testenv.EveryNodeYAML))
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
