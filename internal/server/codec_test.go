package server

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rawCodec sends pre-encoded request bytes as they are, as Envoy's C++
// protobuf does with strings that are not UTF-8 (Go's proto.Marshal
// refuses them).
type rawCodec struct{}

type rawRequest []byte

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(rawRequest), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

// wireWith encodes req, then swaps every placeholder for its replacement
// of the same length, so that the wire form stays well-formed while its
// strings stop being UTF-8.
func wireWith(t testing.TB, req *rlsv3.RateLimitRequest, swaps map[string]string) []byte {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range swaps {
		if len(from) != len(to) {
			t.Fatalf("swap %q for %q changes the length", from, to)
		}
		b = bytes.ReplaceAll(b, []byte(from), []byte(to))
	}
	return b
}

// TestInvalidUTF8Decided is the regression test for descriptor values
// that are not UTF-8 (a header holding byte 0xFF): grpc-go's decoder
// answered Internal, which Envoy's default failure_mode_deny=false lets
// through, so such a value escaped every limit. Now each such value is
// decided, on its own counter.
func TestInvalidUTF8Decided(t *testing.T) {
	st := newStack(t, testConfig, Options{}, nil)
	cc := st.conn(t)
	call := func(wire []byte) (*rlsv3.RateLimitResponse, error) {
		resp := new(rlsv3.RateLimitResponse)
		err := cc.Invoke(context.Background(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, rawRequest(wire), resp, grpc.ForceCodec(rawCodec{}))
		return resp, err
	}
	ff := wireWith(t, request("api", "k", "AA"), map[string]string{"AA": "\xff\xff"})
	fe := wireWith(t, request("api", "k", "AA"), map[string]string{"AA": "\xfe\xff"})
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := call(ff)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("call %d with k=\\xff\\xff: (%v, %v), want %v", i+1, resp, err, want)
		}
	}
	if resp, err := call(fe); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("k=\\xfe\\xff after k=\\xff\\xff was exhausted: (%v, %v), want its own counter, OK", resp, err)
	}
	// Malformed input is still refused, UTF-8 or not.
	bad := append(ff[:len(ff):len(ff)], 0x12, 0x05, 'x')
	if _, err := call(bad); status.Code(err) != codes.Internal {
		t.Fatalf("truncated message: %v, want Internal from the decoder", err)
	}
}

// TestDecodeRequest checks decodeRequest against proto.Unmarshal on valid
// input, and on input proto.Unmarshal refuses for invalid UTF-8 only.
func TestDecodeRequest(t *testing.T) {
	full := &rlsv3.RateLimitRequest{
		Domain:     "dom",
		HitsAddend: 7,
		Descriptors: []*rlv3.RateLimitDescriptor{
			{
				Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k1", Value: "v1"}, {Key: "k2"}},
				Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9, Unit: typev3.RateLimitUnit_HOUR,
					UnitMultiplier: wrapperspb.UInt32(4)},
				HitsAddend:     wrapperspb.UInt64(1 << 40),
				IsNegativeHits: true,
			},
			{},
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Value: "only value"}}, HitsAddend: wrapperspb.UInt64(0)},
			{Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{Unit: -3}},
		},
	}
	for i, req := range []*rlsv3.RateLimitRequest{{}, {Domain: "d"}, full} {
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var got rlsv3.RateLimitRequest
		if err := decodeRequest(wire, &got); err != nil || !proto.Equal(&got, req) {
			t.Fatalf("request %d: decoded (%v, %v), want %v", i, &got, err, req)
		}
	}

	// Unknown fields (a future field 9, a fixed64, a group) are skipped.
	wire, _ := proto.Marshal(full)
	wire = append(wire, 0x4a, 0x01, 'z', 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x5b, 0x08, 0x01, 0x5c)
	var got rlsv3.RateLimitRequest
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatalf("proto.Unmarshal with unknown fields: %v", err)
	}
	var lenient rlsv3.RateLimitRequest
	if err := decodeRequest(wire, &lenient); err != nil || !proto.Equal(&lenient, full) {
		t.Fatalf("with unknown fields: (%v, %v), want %v", &lenient, err, full)
	}

	// Invalid UTF-8 in the domain, a key and a value.
	src := &rlsv3.RateLimitRequest{Domain: "D1D1", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "K1K1", Value: "V1V1"}}},
	}}
	wire = wireWith(t, src, map[string]string{"D1D1": "d\xff\x00d", "K1K1": "k\xc3{}", "V1V1": "\xed\xa0\x80v"})
	var strict rlsv3.RateLimitRequest
	if err := proto.Unmarshal(wire, &strict); !isInvalidUTF8(err) {
		t.Fatalf("proto.Unmarshal: %v, want the invalid UTF-8 error", err)
	}
	if err := decodeRequest(wire, &lenient); err != nil {
		t.Fatal(err)
	}
	e := lenient.Descriptors[0].Entries[0]
	if lenient.Domain != "d\xff\x00d" || e.Key != "k\xc3{}" || e.Value != "\xed\xa0\x80v" {
		t.Fatalf("decoded %q %q %q", lenient.Domain, e.Key, e.Value)
	}
}

// FuzzDecodeRequest: whatever the bytes, decodeRequest (the server's
// decoder of every request) never panics; wherever proto.Unmarshal
// succeeds it decodes the same request (but for unknown fields, which it
// skips); and it accepts nothing proto.Unmarshal refuses but strings that
// are not UTF-8.
func FuzzDecodeRequest(f *testing.F) {
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}},
		{HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{{
			Limit:      &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 2, UnitMultiplier: wrapperspb.UInt32(5)},
			HitsAddend: wrapperspb.UInt64(2), IsNegativeHits: true,
		}}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x0a\x02\xff\xfe\x12\x06\x0a\x04\x0a\x02\xc3("))
	f.Fuzz(func(t *testing.T, data []byte) {
		var lenient rlsv3.RateLimitRequest
		lerr := decodeRequest(data, &lenient)
		var strict rlsv3.RateLimitRequest
		serr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, &strict)
		if serr == nil && (lerr != nil || !proto.Equal(&lenient, &strict)) {
			t.Fatalf("proto.Unmarshal gives %v; decodeRequest (%v, %v)", &strict, &lenient, lerr)
		}
		if serr != nil && lerr == nil && !isInvalidUTF8(serr) {
			t.Fatalf("proto.Unmarshal refuses it (%v); decodeRequest accepts %v", serr, &lenient)
		}
	})
}

// isInvalidUTF8 reports whether err is protobuf's invalid-UTF-8 error.
func isInvalidUTF8(err error) bool {
	var u interface{ InvalidUTF8() bool }
	return errors.As(err, &u) && u.InvalidUTF8()
}

// benchRequest and benchResponse are what one Envoy call of the load
// benchmark carries: one descriptor of one entry, and its answer.
func benchRequest() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.42.7"}},
	}}}
}

func benchResponse() *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 50, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining:     49,
			DurationUntilReset: durationpb.New(730 * time.Millisecond),
		}},
	}
}

// TestCodecRoundTrip: what the codec encodes, proto.Unmarshal reads back
// equal, and what proto.Marshal encodes, the codec reads back equal --
// with the vtproto marshaler when built with -tags vtprotobuf, and with
// the proto codec otherwise.
func TestCodecRoundTrip(t *testing.T) {
	c := newCodec()
	full := benchResponse()
	full.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	full.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "x-ratelimit-limit", Value: "50, 50;w=1"}}
	full.RequestHeadersToAdd = []*corev3.HeaderValue{{Key: "x-a", Value: "b"}}
	full.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"sluice": map[string]any{"rule": "per_second", "n": 1.5}})
	full.Statuses = append(full.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT})
	for _, resp := range []*rlsv3.RateLimitResponse{benchResponse(), full, {}} {
		data, err := c.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got := new(rlsv3.RateLimitResponse)
		if err := proto.Unmarshal(data.Materialize(), got); err != nil || !proto.Equal(got, resp) {
			t.Fatalf("codec encoded %v, proto decodes %v (%v)", resp, got, err)
		}
	}
	_, vt := any(full).(vtMarshaler)
	t.Logf("vtproto marshaler: %v", vt)

	wire, err := proto.Marshal(benchRequest())
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []mem.BufferSlice{
		{mem.SliceBuffer(wire)},
		{mem.SliceBuffer(wire[:5]), mem.SliceBuffer(wire[5:])}, // split over two buffers
	} {
		got := new(rlsv3.RateLimitRequest)
		if err := c.Unmarshal(data, got); err != nil || !proto.Equal(got, benchRequest()) {
			t.Fatalf("codec decodes %v (%v), want %v", got, err, benchRequest())
		}
	}
}

// BenchmarkCodec compares, side by side, grpc-go's proto codec with the
// server's codec on one request and one response of the load benchmark.
// Run it with and without -tags vtprotobuf to see the vtproto marshaler.
func BenchmarkCodec(b *testing.B) {
	std := encoding.GetCodecV2(protocodec.Name)
	wire, err := std.Marshal(benchRequest())
	if err != nil {
		b.Fatal(err)
	}
	resp := benchResponse()
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"proto", std}, {"sluice", newCodec()}} {
		b.Run("unmarshal/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var req rlsv3.RateLimitRequest
				if err := c.codec.Unmarshal(wire, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("marshal/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.codec.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
