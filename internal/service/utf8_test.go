package service

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestInvalidUTF8Metadata is the regression test for request strings that
// are not UTF-8 (the server decodes them as sent): echoed into dynamic
// metadata as they were, they made the whole response fail to encode, so
// the client got Internal instead of the decision. They are now echoed
// with U+FFFD in place of each invalid sequence.
func TestInvalidUTF8Metadata(t *testing.T) {
	h := newHarness(t, Options{DynamicMetadata: true}, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	resp := h.call(t, rq("d\xff", d("k\xfe", "v\xc3")))
	if _, err := proto.Marshal(resp); err != nil {
		t.Fatalf("response does not encode: %v", err)
	}
	resp = h.call(t, rq("d", d("k", "v\xff"), d("k", "v\xfe")))
	if _, err := proto.Marshal(resp); err != nil {
		t.Fatalf("response does not encode: %v", err)
	}
	// Both values were decided on their own counters (1 per hour each).
	expect(t, resp, OK, "OK 1/HOUR rem=0 reset=1h0m0s", "OK 1/HOUR rem=0 reset=1h0m0s")
	entries := resp.DynamicMetadata.Fields["descriptors"].GetListValue().Values[0].GetStructValue().Fields["entries"].GetListValue().Values
	if got := entries[0].GetStringValue(); got != "k=v\uFFFD" || strings.ContainsRune(got, 0xff) {
		t.Fatalf("entry echoed as %q, want %q", got, "k=v\uFFFD")
	}
}
