package server

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// largeRequest is a request of about size bytes: descriptors of one
// 60 KiB value each, as Envoy sends when a header rule copies a long
// header into many descriptors.
func largeRequest(size int) *rlsv3.RateLimitRequest {
	const value = 60 << 10
	req := &rlsv3.RateLimitRequest{Domain: "api"}
	for range (size + value - 1) / value {
		req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "k", Value: strings.Repeat("v", value)}}})
	}
	return req
}

// TestGRPCRequestSizeDefault: by default a gRPC request up to 4 MiB
// (gRPC's own default, which envoyproxy/ratelimit keeps) is decided; a
// larger one is refused ResourceExhausted, and every refusal is counted
// (Load, OnRequestTooLarge) and logged as a warning, throttled, naming
// the setting: Envoy passes the refused request with no limit.
func TestGRPCRequestSizeDefault(t *testing.T) {
	cases := []struct {
		name    string
		max     int // Options.MaxRequestBytes
		size    int
		refused bool
	}{
		{"1.1 MB under the default", 0, 1_108_069, false},
		{"4 MB under the default", 0, 4_000_000, false},
		{"5 MB over the default", 0, 5 << 20, true},
		{"over a 1 MiB bound", 1 << 20, 1_108_069, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bound := tc.max
			if bound == 0 {
				bound = DefaultMaxRequestBytes
			}
			log, hook := logtest.NewNullLogger()
			var notified atomic.Int64
			st := newStack(t, testConfig, Options{MaxRequestBytes: tc.max, Logger: log, OnRequestTooLarge: func() { notified.Add(1) }}, nil)
			client := rlsv3.NewRateLimitServiceClient(st.conn(t))
			req := largeRequest(tc.size)
			for range 3 {
				resp, err := client.ShouldRateLimit(context.Background(), req)
				if !tc.refused {
					if err != nil || len(resp.GetStatuses()) != len(req.Descriptors) {
						t.Fatalf("%d-byte request: %v, want it decided", tc.size, err)
					}
					continue
				}
				if want := fmt.Sprintf("larger than max (%d vs. %d)", proto.Size(req), bound); status.Code(err) != codes.ResourceExhausted || !strings.HasSuffix(err.Error(), want) {
					t.Fatalf("%d-byte request: %v, want ResourceExhausted naming the sizes", tc.size, err)
				}
			}
			want := 0
			if tc.refused {
				want = 3
			}
			if got := st.srv.Load().TooLarge; got != uint64(want) {
				t.Errorf("Load().TooLarge %d, want %d", got, want)
			}
			if got := notified.Load(); got != int64(want) {
				t.Errorf("OnRequestTooLarge called %d times, want %d", got, want)
			}
			var warnings []*logrus.Entry
			for _, e := range hook.AllEntries() {
				if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "SLUICE_MAX_REQUEST_BYTES") {
					warnings = append(warnings, e)
				}
			}
			if !tc.refused {
				if len(warnings) != 0 {
					t.Errorf("%d warnings for requests decided", len(warnings))
				}
				return
			}
			if len(warnings) != 1 {
				t.Fatalf("%d warnings for 3 refusals, want 1 (throttled)", len(warnings))
			}
			if w := warnings[0]; w.Data["via"] != "gRPC" || w.Data["max_request_bytes"] != bound {
				t.Errorf("warning %v, want via gRPC and the bound %d", w.Data, bound)
			}
		})
	}
}

// TestJSONTooLargeCounted: a /json body over the bound is 413 naming the
// setting, counted and logged like a gRPC request.
func TestJSONTooLargeCounted(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	var notified atomic.Int64
	st := newStack(t, testConfig, Options{MaxRequestBytes: 4096, Logger: log, OnRequestTooLarge: func() { notified.Add(1) }}, nil)
	code, body := st.do(t, "POST", "/json", `{"domain":"`+strings.Repeat("x", 5000)+`"}`)
	if code != 413 || !strings.Contains(body, "larger than 4096 bytes (SLUICE_MAX_REQUEST_BYTES)") {
		t.Fatalf("%d %q, want 413 naming the bound and the setting", code, body)
	}
	if st.srv.Load().TooLarge != 1 || notified.Load() != 1 {
		t.Errorf("counted %d, notified %d; want 1 and 1", st.srv.Load().TooLarge, notified.Load())
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel || e.Data["via"] != "/json" {
		t.Errorf("last log entry %v, want the warning for /json", e)
	}
}
