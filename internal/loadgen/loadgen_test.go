package loadgen

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
)

// judge answers by the request's key number (the "n" entry): OVER_LIMIT for
// attack keys (≥ keys), Unavailable for multiples of 7, ResourceExhausted
// for multiples of 11, OK otherwise, and counts what it answered.
type judge struct {
	rlsv3.UnimplementedRateLimitServiceServer
	keys                                      uint64
	ok, over, unavailable, exhausted, attacks atomic.Int64
}

func (j *judge) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	var n uint64
	for _, e := range req.Descriptors[0].Entries {
		if e.Key == "n" {
			n, _ = strconv.ParseUint(e.Value, 10, 64)
		}
	}
	switch {
	case n >= j.keys:
		j.attacks.Add(1)
		j.over.Add(1)
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	case n%7 == 0:
		j.unavailable.Add(1)
		return nil, status.Error(codes.Unavailable, "no")
	case n%11 == 0:
		j.exhausted.Add(1)
		return nil, status.Error(codes.ResourceExhausted, "no")
	}
	j.ok.Add(1)
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func templates(t *testing.T, s ...string) []Template {
	t.Helper()
	var out []Template
	for _, x := range s {
		tm, err := ParseTemplate(x)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tm)
	}
	return out
}

func TestRunCountsAddUp(t *testing.T) {
	j := &judge{keys: 100}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, j)
	addr := stacktest.ServeGRPCAddr(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{
		Target: addr, Descriptors: templates(t, "n={n},user={id}"), Workers: 8, Conns: 3, Requests: 400,
		Keys: Keys{Count: 100, AttackKeys: 2, AttackShare: 0.25}, Seed: 1, Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 400 || r.Histogram.Count() != 400 || r.CallsTotal != 400 {
		t.Fatalf("%d calls counted, want 400", r.Requests)
	}
	if sum := r.OK + r.OverLimit + r.Unknown + r.ErrorTotal; sum != r.Requests {
		t.Errorf("ok %d + over %d + unknown %d + errors %d = %d, want %d", r.OK, r.OverLimit, r.Unknown, r.ErrorTotal, sum, r.Requests)
	}
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"ok", r.OK, uint64(j.ok.Load())},
		{"over_limit", r.OverLimit, uint64(j.over.Load())},
		{"Unavailable", r.Errors["Unavailable"], uint64(j.unavailable.Load())},
		{"ResourceExhausted", r.Errors["ResourceExhausted"], uint64(j.exhausted.Load())},
		{"attack requests", r.Attack.Requests, uint64(j.attacks.Load())},
		{"attack over_limit", r.Attack.OverLimit, uint64(j.attacks.Load())},
		{"normal requests", r.Normal.Requests, r.Requests - uint64(j.attacks.Load())},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: report %d, server %d", c.name, c.got, c.want)
		}
	}
	if r.ErrorTotal == 0 || r.OverLimit == 0 || r.OK == 0 {
		t.Errorf("the run did not exercise every answer: %+v", r)
	}
	if r.Throughput <= 0 || r.ElapsedSec <= 0 || r.Latency.P50 <= 0 || r.Latency.Max < r.Latency.P99 || r.ClientCPUSec <= 0 {
		t.Errorf("implausible figures: %+v", r)
	}
	// Eight callers share the connections, so every socket write carries
	// at most eight calls: 400 calls need at least 50 writes.
	if _, measured := processSyscalls(); measured && (r.ClientSyscalls == nil || *r.ClientSyscalls < 50) {
		t.Errorf("client system calls %v, want at least 50 for 400 calls", r.ClientSyscalls)
	}
	line, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(line, &back); err != nil || back["requests"] != float64(400) {
		t.Errorf("JSON line %s: %v", line, err)
	}
}

func TestRunWarmupAndDuration(t *testing.T) {
	addr := stacktest.ServeGRPCAddr(t, NewNoopServer())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{
		Target: addr, Descriptors: templates(t, "remote_address={ip}", "user={id},path=/api"), Workers: 4,
		Warmup: 50 * time.Millisecond, Duration: 150 * time.Millisecond, Keys: Keys{Count: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests == 0 || r.OK != r.Requests || r.ErrorTotal != 0 || r.CallsTotal <= r.Requests {
		t.Fatalf("noop run (warm-up calls must count in CallsTotal only): %+v", r)
	}
	// The measured phase is the duration plus at most the last call.
	if r.ElapsedSec < 0.15 || r.ElapsedSec > 0.15+r.Latency.Max/1000+0.001 {
		t.Errorf("elapsed %.3fs for a 150ms phase (max latency %.3fms)", r.ElapsedSec, r.Latency.Max)
	}
}

func TestRunCancelled(t *testing.T) {
	addr := stacktest.ServeGRPCAddr(t, NewNoopServer())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := Run(ctx, Config{Target: addr, Descriptors: templates(t, "k=v"), Duration: time.Hour})
	if err != nil || r.Requests != 0 || r.ErrorTotal != 0 {
		t.Fatalf("cancelled run: %+v, %v", r, err)
	}
}

func TestRunErrors(t *testing.T) {
	tm := templates(t, "k=v")
	for _, c := range []Config{
		{Descriptors: tm},
		{Target: "127.0.0.1:1"},
		{Target: "127.0.0.1:1", Descriptors: tm, Warmup: -1},
		{Target: "127.0.0.1:1", Descriptors: tm, Keys: Keys{AttackShare: 0.5}},
		{Target: "127.0.0.1:1", Descriptors: tm, Keys: Keys{AttackShare: 1.5, AttackKeys: 1}},
		{Target: "127.0.0.1:1", Descriptors: tm, Keys: Keys{Distribution: Zipf, ZipfS: 0.9}},
	} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// A server that is not there: every call fails, and each is counted.
func TestRunUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	r, err := Run(context.Background(), Config{Target: addr, Descriptors: templates(t, "k=v"), Workers: 2, Requests: 20, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 20 || r.Errors["Unavailable"] != 20 || r.OK != 0 {
		t.Errorf("unreachable server: %+v, want 20 Unavailable", r)
	}
}

func TestNoop(t *testing.T) {
	n := NewNoop()
	tm := templates(t, "a=b")[0]
	for _, k := range []int{0, 1, 3, 16, 40} {
		req := &rlsv3.RateLimitRequest{}
		for range k {
			req.Descriptors = append(req.Descriptors, tm.Expand(0))
		}
		resp, err := n.ShouldRateLimit(context.Background(), req)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != k {
			t.Errorf("%d descriptors: %v, %v", k, resp, err)
		}
	}
}
