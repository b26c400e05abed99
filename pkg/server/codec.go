package server

import (
	"errors"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// codec is the gRPC server's codec: grpc-go's proto codec, except that a
// RateLimitRequest whose strings are not valid UTF-8 is still decoded,
// byte for byte, instead of failing.
//
// Envoy fills descriptor values from request headers, paths and the like,
// which may hold any byte (obs-text), and its C++ protobuf sends such
// strings as they are (it only logs). grpc-go's decoder rejects them with
// Internal, and Envoy treats an error from the rate-limit service as "no
// decision": with its default failure_mode_deny false the request passes.
// A client could then skip every limit keyed on a header just by putting a
// byte 0xFF in it. Decoded leniently, such a value is simply another value:
// pkg/identity keys state by bytes, so it gets its own counter.
type codec struct{ encoding.CodecV2 }

// newCodec returns the codec wrapping grpc-go's registered proto codec.
func newCodec() codec { return codec{encoding.GetCodecV2(protocodec.Name)} }

// Unmarshal decodes data into v with the proto codec, and decodes a
// RateLimitRequest rejected only for invalid UTF-8 with decodeRequest.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	req, ok := v.(*rlsv3.RateLimitRequest)
	if err == nil || !ok || !isInvalidUTF8(err) {
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if lerr := decodeRequest(buf.ReadOnlyData(), req); lerr != nil {
		return fmt.Errorf("%w (and decoding it byte for byte: %w)", err, lerr)
	}
	return nil
}

// isInvalidUTF8 reports whether err is protobuf's invalid-UTF-8 error.
func isInvalidUTF8(err error) bool {
	var u interface{ InvalidUTF8() bool }
	return errors.As(err, &u) && u.InvalidUTF8()
}

// decodeRequest decodes the wire form of a RateLimitRequest into r (reset
// first) as proto.Unmarshal does (unknown fields skipped, a repeated
// singular field's last value wins, repeated message fields merge), except
// that string fields keep their bytes whatever they are. Field numbers are
// those of envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto.
func decodeRequest(b []byte, r *rlsv3.RateLimitRequest) error {
	r.Reset()
	return wireFields(b, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.Domain = string(val)
		case num == 2 && typ == protowire.BytesType:
			d := new(ratelimitv3.RateLimitDescriptor)
			if err := decodeDescriptor(val, d); err != nil {
				return fmt.Errorf("descriptor %d: %w", len(r.Descriptors), err)
			}
			r.Descriptors = append(r.Descriptors, d)
		case num == 3 && typ == protowire.VarintType:
			r.HitsAddend = uint32(n)
		}
		return nil
	})
}

func decodeDescriptor(b []byte, d *ratelimitv3.RateLimitDescriptor) error {
	return wireFields(b, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e := new(ratelimitv3.RateLimitDescriptor_Entry)
			err := wireFields(val, func(num protowire.Number, typ protowire.Type, _ uint64, val []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					e.Key = string(val)
				case num == 2 && typ == protowire.BytesType:
					e.Value = string(val)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("entry %d: %w", len(d.Entries), err)
			}
			d.Entries = append(d.Entries, e)
		case num == 2 && typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = new(ratelimitv3.RateLimitDescriptor_RateLimitOverride)
			}
			o := d.Limit
			err := wireFields(val, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
				switch {
				case num == 1 && typ == protowire.VarintType:
					o.RequestsPerUnit = uint32(n)
				case num == 2 && typ == protowire.VarintType:
					o.Unit = typev3.RateLimitUnit(int32(n))
				case num == 3 && typ == protowire.BytesType:
					if o.UnitMultiplier == nil {
						o.UnitMultiplier = new(wrapperspb.UInt32Value)
					}
					w := o.UnitMultiplier
					return wireFields(val, func(num protowire.Number, typ protowire.Type, n uint64, _ []byte) error {
						if num == 1 && typ == protowire.VarintType {
							w.Value = uint32(n)
						}
						return nil
					})
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("limit: %w", err)
			}
		case num == 3 && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = new(wrapperspb.UInt64Value)
			}
			w := d.HitsAddend
			err := wireFields(val, func(num protowire.Number, typ protowire.Type, n uint64, _ []byte) error {
				if num == 1 && typ == protowire.VarintType {
					w.Value = n
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("hits_addend: %w", err)
			}
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = n != 0
		}
		return nil
	})
}

// wireFields calls f for every field of the encoded message b, in order: n
// for a varint, val for a length-delimited field, neither for the others
// (which it skips). It fails on malformed input.
func wireFields(b []byte, f func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		var n uint64
		var val []byte
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			val, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if err := f(num, typ, n, val); err != nil {
			return err
		}
	}
	return nil
}
