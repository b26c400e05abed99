package rlqs

import (
	"slices"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// AppendResponse appends r's wire encoding to b, its strings byte for
// byte: the bucket ids sluice echoes are the client's, which DecodeReports
// takes whatever bytes they hold, and proto.Marshal would refuse one that
// is not UTF-8 (failing the whole stream). Map entries are in key order, so
// the encoding is deterministic; what it decodes to is what proto.Marshal's
// would.
func AppendResponse(b []byte, r *rlqspb.RateLimitQuotaResponse) []byte {
	for _, a := range r.GetBucketAction() {
		b = appendMessage(b, 1, appendAction(nil, a))
	}
	return b
}

// appendMessage appends field num holding the encoded message m.
func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// appendVarint appends field num as a varint, unless it is 0.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendAction(b []byte, a *rlqspb.RateLimitQuotaResponse_BucketAction) []byte {
	if id := a.GetBucketId(); id != nil {
		var m []byte
		keys := make([]string, 0, len(id.GetBucket()))
		for k := range id.GetBucket() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, id.GetBucket()[k])
			m = appendMessage(m, 1, e)
		}
		b = appendMessage(b, 1, m)
	}
	switch x := a.GetBucketAction().(type) {
	case *rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
		var m []byte
		if ttl := x.QuotaAssignmentAction.GetAssignmentTimeToLive(); ttl != nil {
			m = appendMessage(m, 2, appendDuration(nil, ttl))
		}
		if s := x.QuotaAssignmentAction.GetRateLimitStrategy(); s != nil {
			m = appendMessage(m, 3, appendStrategy(nil, s))
		}
		b = appendMessage(b, 2, m)
	case *rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_:
		b = appendMessage(b, 3, nil)
	}
	return b
}

func appendDuration(b []byte, d *durationpb.Duration) []byte {
	b = appendVarint(b, 1, uint64(d.GetSeconds()))
	return appendVarint(b, 2, uint64(int64(d.GetNanos())))
}

func appendStrategy(b []byte, s *typev3.RateLimitStrategy) []byte {
	switch x := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		// A oneof member is sent even at its zero value.
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(x.BlanketRule))
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		var m []byte
		m = appendVarint(m, 1, x.RequestsPerTimeUnit.GetRequestsPerTimeUnit())
		m = appendVarint(m, 2, uint64(x.RequestsPerTimeUnit.GetTimeUnit()))
		b = appendMessage(b, 2, m)
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := x.TokenBucket
		var m []byte
		m = appendVarint(m, 1, uint64(tb.GetMaxTokens()))
		if w := tb.GetTokensPerFill(); w != nil {
			m = appendMessage(m, 2, appendVarint(nil, 1, uint64(w.GetValue())))
		}
		if f := tb.GetFillInterval(); f != nil {
			m = appendMessage(m, 3, appendDuration(nil, f))
		}
		b = appendMessage(b, 3, m)
	}
	return b
}
