package rlqs

import (
	"fmt"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/wirefields"
)

// DecodeReports decodes a RateLimitQuotaUsageReports from the wire into r,
// taking strings byte for byte, valid UTF-8 or not. Envoy's bucket_id
// values come from request headers and the like, which may hold any byte,
// and its C++ protobuf sends such strings as they are; grpc-go's decoder
// would refuse the whole message, ending the stream of every bucket of
// that Envoy. Decoded leniently, such a value is another bucket. Unknown
// fields are skipped; malformed input is an error.
func DecodeReports(b []byte, r *rlqspb.RateLimitQuotaUsageReports) error {
	r.Reset()
	return wirefields.Each(b, func(num protowire.Number, typ protowire.Type, _ uint64, val []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.Domain = string(val)
		case num == 2 && typ == protowire.BytesType:
			u := new(rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage)
			if err := decodeUsage(val, u); err != nil {
				return fmt.Errorf("bucket_quota_usages %d: %w", len(r.BucketQuotaUsages), err)
			}
			r.BucketQuotaUsages = append(r.BucketQuotaUsages, u)
		}
		return nil
	})
}

// decodeUsage decodes one BucketQuotaUsage.
func decodeUsage(b []byte, u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	return wirefields.Each(b, func(num protowire.Number, typ protowire.Type, n uint64, val []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if u.BucketId == nil {
				u.BucketId = &rlqspb.BucketId{Bucket: map[string]string{}}
			}
			return decodeBucketID(val, u.BucketId)
		case num == 2 && typ == protowire.BytesType:
			var secs int64
			var nanos int32
			err := wirefields.Each(val, func(num protowire.Number, typ protowire.Type, n uint64, _ []byte) error {
				switch {
				case num == 1 && typ == protowire.VarintType:
					secs = int64(n)
				case num == 2 && typ == protowire.VarintType:
					nanos = int32(n)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("time_elapsed: %w", err)
			}
			u.TimeElapsed = &durationpb.Duration{Seconds: secs, Nanos: nanos}
		case num == 3 && typ == protowire.VarintType:
			u.NumRequestsAllowed = n
		case num == 4 && typ == protowire.VarintType:
			u.NumRequestsDenied = n
		}
		return nil
	})
}

// decodeBucketID adds one BucketId's map entries to id (a repeated field
// merges, as proto does).
func decodeBucketID(b []byte, id *rlqspb.BucketId) error {
	return wirefields.Each(b, func(num protowire.Number, typ protowire.Type, _ uint64, val []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var k, v string
		err := wirefields.Each(val, func(num protowire.Number, typ protowire.Type, _ uint64, val []byte) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				k = string(val)
			case num == 2 && typ == protowire.BytesType:
				v = string(val)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bucket entry: %w", err)
		}
		id.Bucket[k] = v
		return nil
	})
}
