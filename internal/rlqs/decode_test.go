package rlqs

import (
	"bytes"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestDecodeReportsMatchesProto: on valid messages DecodeReports decodes
// what proto.Unmarshal decodes.
func TestDecodeReportsMatchesProto(t *testing.T) {
	cases := []*rlqspb.RateLimitQuotaUsageReports{
		{},
		{Domain: "d"},
		{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"a": "1", "b": ""}}, TimeElapsed: durationpb.New(1500000000), NumRequestsAllowed: 7, NumRequestsDenied: 1 << 40},
			{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"": "x"}}},
			{TimeElapsed: &durationpb.Duration{Seconds: -1, Nanos: -5}},
		}},
	}
	for i, want := range cases {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := &rlqspb.RateLimitQuotaUsageReports{}
		if err := DecodeReports(b, got); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("case %d: got %v, want %v", i, got, want)
		}
	}
}

// TestDecodeReportsLenient: a bucket value that is not UTF-8 is kept byte
// for byte (proto.Unmarshal refuses it); malformed input is an error.
func TestDecodeReportsLenient(t *testing.T) {
	entry := protowire.AppendTag(nil, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "user")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, "\xff\xfe")
	id := protowire.AppendTag(nil, 1, protowire.BytesType)
	id = protowire.AppendBytes(id, entry)
	usage := protowire.AppendTag(nil, 1, protowire.BytesType)
	usage = protowire.AppendBytes(usage, id)
	usage = protowire.AppendTag(usage, 3, protowire.VarintType)
	usage = protowire.AppendVarint(usage, 2)
	msg := protowire.AppendTag(nil, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, "d")
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, usage)

	if err := proto.Unmarshal(msg, &rlqspb.RateLimitQuotaUsageReports{}); err == nil {
		t.Fatal("proto.Unmarshal accepted invalid UTF-8: the test shows nothing")
	}
	got := &rlqspb.RateLimitQuotaUsageReports{}
	if err := DecodeReports(msg, got); err != nil {
		t.Fatal(err)
	}
	if u := got.GetBucketQuotaUsages(); len(u) != 1 || u[0].GetBucketId().GetBucket()["user"] != "\xff\xfe" || u[0].GetNumRequestsAllowed() != 2 {
		t.Errorf("decoded %v", got)
	}
	for _, bad := range [][]byte{msg[:len(msg)-1], {0x12, 0x05, 0x0a}, {0xff}} {
		if err := DecodeReports(bad, &rlqspb.RateLimitQuotaUsageReports{}); err == nil {
			t.Errorf("DecodeReports(%x) accepted malformed input", bad)
		}
	}
}

// TestAppendResponse: what AppendResponse encodes decodes, with
// proto.Unmarshal, to the message it encoded, for every kind of action;
// and a bucket value that is not UTF-8 is encoded byte for byte.
func TestAppendResponse(t *testing.T) {
	id := &rlqspb.BucketId{Bucket: map[string]string{"b": "2", "a": "1", "": ""}}
	want := &rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{
		allowAll(id, 10*time.Second),
		grant{deny: true}.action(id, 0, 3*time.Second),
		grant{perFill: 30, fill: 60, max: 12}.action(id, 0, 10*time.Second),
		grant{perFill: 1, fill: 1}.action(id, 0, time.Second),
		abandon(id),
		{BucketId: id, BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 5, TimeUnit: typev3.RateLimitUnit_MINUTE}}}}}},
		{},
	}}
	got := &rlqspb.RateLimitQuotaResponse{}
	if err := proto.Unmarshal(AppendResponse(nil, want), got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("decoded\n%v\nwant\n%v", got, want)
	}
	bad := &rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{allowAll(&rlqspb.BucketId{Bucket: map[string]string{"user": "\xff"}}, time.Second)}}
	if _, err := proto.Marshal(bad); err == nil {
		t.Fatal("proto.Marshal accepted invalid UTF-8: the test shows nothing")
	}
	if b := AppendResponse(nil, bad); !bytes.Contains(b, []byte("user\x12\x01\xff")) {
		t.Errorf("the value is not encoded byte for byte: %x", b)
	}
}
