package server

import (
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/rlqs"
	"github.com/sluice-rl/sluice/internal/wirefields"
)

// codec is the gRPC server's codec: grpc-go's proto codec, except on the
// hot path. A RateLimitRequest is decoded by decodeRequest, straight from
// the wire (no reflection; tested against proto.Unmarshal), and its strings
// byte for byte, valid UTF-8 or not. A response is encoded by the
// generated vtproto marshaler when the binary has it (go build -tags
// vtprotobuf: go-control-plane ships those files behind that tag).
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

// Unmarshal decodes data into v: a RateLimitRequest with decodeRequest, a
// Rate Limit Quota Service report with rlqs.DecodeReports (its bucket ids
// come from request headers too), anything else with the proto codec.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if rep, ok := v.(*rlqspb.RateLimitQuotaUsageReports); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		if err := rlqs.DecodeReports(buf.ReadOnlyData(), rep); err != nil {
			return fmt.Errorf("decoding a RateLimitQuotaUsageReports: %w", err)
		}
		return nil
	}
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	var err error
	if len(data) == 1 { // the usual case: no copy
		err = decodeRequest(data[0].ReadOnlyData(), req)
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		err = decodeRequest(buf.ReadOnlyData(), req)
		buf.Free()
	}
	if err != nil {
		return fmt.Errorf("decoding a RateLimitRequest: %w", err)
	}
	return nil
}

// vtMarshaler is the generated vtproto marshaler of a message, present
// when the binary is built with -tags vtprotobuf.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// Marshal encodes a Rate Limit Quota Service response with
// rlqs.AppendResponse, any other v with its vtproto marshaler if it has
// one, else with the proto codec. Like the proto codec, it takes the buffer from gRPC's
// pool unless the message is small.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rlqspb.RateLimitQuotaResponse); ok {
		// Its bucket ids echo the client's bytes, UTF-8 or not.
		return mem.BufferSlice{mem.SliceBuffer(rlqs.AppendResponse(nil, r))}, nil
	}
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVTStrict(buf); err != nil {
			return nil, fmt.Errorf("encoding %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// decodeRequest decodes the wire form of a RateLimitRequest into r (reset
// first) as proto.Unmarshal does (unknown fields skipped, a repeated
// singular field's last value wins, repeated message fields merge), except
// that string fields keep their bytes whatever they are. Field numbers are
// those of envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto.
func decodeRequest(b []byte, r *rlsv3.RateLimitRequest) error {
	r.Reset()
	return wirefields.Each(b, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
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
	return wirefields.Each(b, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e := new(ratelimitv3.RateLimitDescriptor_Entry)
			err := wirefields.Each(val, func(num protowire.Number, typ protowire.Type, _ uint64, val []byte) error {
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
			err := wirefields.Each(val, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
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
					return wirefields.Each(val, func(num protowire.Number, typ protowire.Type, n uint64, _ []byte) error {
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
			err := wirefields.Each(val, func(num protowire.Number, typ protowire.Type, n uint64, _ []byte) error {
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
