package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/testkit/envoyquota"
)

// TestServeRLQS: sluice serve answers StreamRateLimitQuotas on its gRPC
// listener, beside ShouldRateLimit, on the same config; with --rlqs=false
// it does not, and the metrics count the streams.
func TestServeRLQS(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(2))
	cases := []struct {
		name   string
		args   []string
		served bool
	}{
		{"on by default", nil, true},
		{"off", []string{"--rlqs=false"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, []string{"SLUICE_CONFIG=" + dir}, tc.args...)
			conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			e := envoyquota.New(envoyquota.Config{Domain: "api", ReportingInterval: time.Second, Wait: 10 * time.Second}, conn, time.Now)
			defer e.Close()
			if !e.Request(map[string]string{"k": "v"}) {
				t.Fatal("the first request of a bucket was denied (no_assignment_behavior is allow)")
			}
			a := e.Assignment(map[string]string{"k": "v"})
			if !tc.served {
				if a != nil || e.Lost != 1 {
					t.Fatalf("with --rlqs=false: assignment %v, lost reports %d; want none, 1", a, e.Lost)
				}
				return
			}
			tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
			// 2 per (365-day) year: the whole limit, less the request the
			// first report counted.
			if tb.GetTokensPerFill().GetValue() != 2 || tb.GetMaxTokens() != 1 || tb.GetFillInterval().GetSeconds() != 365*86400 {
				t.Fatalf("assignment %v, want a token bucket of 2 per year holding 1", a)
			}
			if _, body := s.get(t, "/metrics"); !strings.Contains(body, "sluice_rlqs_streams 1") {
				t.Errorf("/metrics lacks sluice_rlqs_streams 1:\n%s", grepLines(body, "sluice_rlqs_"))
			}
		})
	}
}

// grepLines returns the lines of s holding sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
