package server

import (
	"context"
	"encoding/json"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

func TestGRPCShouldRateLimit(t *testing.T) {
	st := newStack(t, testConfig, Options{}, nil)
	client := rlsv3.NewRateLimitServiceClient(st.conn(t))
	ctx := context.Background()

	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	for i, w := range want {
		resp, err := client.ShouldRateLimit(ctx, request("api", "k", "v"))
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if resp.OverallCode != w {
			t.Errorf("call %d: %v, want %v", i+1, resp.OverallCode, w)
		}
		if got := resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != 2 {
			t.Errorf("call %d: current limit %d, want 2", i+1, got)
		}
	}
	// Another value has its own counter; an unknown domain is OK.
	if resp, err := client.ShouldRateLimit(ctx, request("api", "k", "w")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("k=w: %v, %v", resp.GetOverallCode(), err)
	}
	if resp, err := client.ShouldRateLimit(ctx, request("nope", "k", "v")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("unknown domain: %v, %v", resp.GetOverallCode(), err)
	}
	// A bad request is InvalidArgument, through the transport.
	if _, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty request: %v, want InvalidArgument", err)
	}
}

func TestGRPCRequestSizeBound(t *testing.T) {
	st := newStack(t, testConfig, Options{MaxRequestBytes: 4096}, nil)
	client := rlsv3.NewRateLimitServiceClient(st.conn(t))
	_, err := client.ShouldRateLimit(context.Background(), request("api", "k", strings.Repeat("x", 8192)))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("8 KiB request with a 4 KiB bound: %v, want ResourceExhausted", err)
	}
}

// TestGRPCHealth asks a real gRPC health client about every name a probe
// may use: the server (""), envoyproxy/ratelimit's "ratelimit" and the
// full service name; all follow SetServing.
func TestGRPCHealth(t *testing.T) {
	names := []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"}
	st := newStack(t, testConfig, Options{}, nil)
	hc := healthpb.NewHealthClient(st.conn(t))
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health %q: %v", service, err)
		}
		return resp.Status
	}
	for _, svc := range names {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v, want SERVING", svc, got)
		}
	}
	st.srv.SetServing(false)
	for _, svc := range names {
		if got := check(svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q after SetServing(false): %v, want NOT_SERVING", svc, got)
		}
	}
	if code, _ := st.do(t, "GET", "/healthcheck", ""); code != 500 {
		t.Errorf("/healthcheck after SetServing(false): %d, want 500", code)
	}
	st.srv.SetServing(true)
	for _, svc := range names {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q after SetServing(true): %v, want SERVING", svc, got)
		}
	}
	if code, body := st.do(t, "GET", "/healthcheck", ""); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 OK", code, body)
	}
}

// TestNoReflectionOnServingPort: reflection describes the service to
// anyone who connects; it is served by the admin listener only, and
// GetServiceInfo lists the services for it.
func TestNoReflectionOnServingPort(t *testing.T) {
	st := newStack(t, testConfig, Options{}, nil)
	stream, err := reflectionpb.NewServerReflectionClient(st.conn(t)).ServerReflectionInfo(context.Background())
	if err == nil {
		// Send may see io.EOF once the server has closed the stream; the
		// status is Recv's.
		_ = stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		})
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection on the serving port: %v, want Unimplemented", err)
	}
	var names []string
	for name := range st.srv.GetServiceInfo() {
		names = append(names, name)
	}
	for _, want := range []string{RateLimitServiceName, "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("GetServiceInfo lists %v, missing %s", names, want)
		}
	}
}

func TestJSON(t *testing.T) {
	st := newStack(t, testConfig, Options{MaxRequestBytes: 4096}, nil)
	const kv = `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	// jsonAnswer is the part of a RateLimitResponse the test reads. protojson
	// varies its whitespace on purpose, so the body is parsed, not compared.
	type jsonAnswer struct {
		OverallCode string
		Statuses    []struct {
			Code           string
			LimitRemaining int
			CurrentLimit   struct {
				RequestsPerUnit int
				Unit            string
			}
		}
	}
	tests := []struct {
		name      string
		method    string
		body      string
		wantCode  int
		wantJSON  string // overallCode/statuses[0].code/limitRemaining, for 200 and 429
		wantError string // a substring of the plain-text error, otherwise
	}{
		{"first call", "POST", kv, 200, "OK/OK/1", ""},
		{"second call, any method", "GET", kv, 200, "OK/OK/0", ""},
		{"over the limit", "PUT", kv, 429, "OVER_LIMIT/OVER_LIMIT/0", ""},
		{"not JSON", "POST", `domain=api`, 400, "", "not a proto3 JSON"},
		{"unknown field", "POST", `{"domain":"api","bogus":1}`, 400, "", "bogus"},
		{"invalid argument", "POST", `{"domain":""}`, 400, "", "domain"},
		{"too large", "POST", `{"domain":"` + strings.Repeat("x", 5000) + `"}`, 413, "", "larger than 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := st.do(t, tt.method, "/json", tt.body)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", code, tt.wantCode, body)
			}
			if tt.wantJSON == "" {
				if !strings.Contains(body, tt.wantError) {
					t.Errorf("body %q, want it to contain %q", body, tt.wantError)
				}
				return
			}
			var a jsonAnswer
			if err := json.Unmarshal([]byte(body), &a); err != nil || len(a.Statuses) != 1 {
				t.Fatalf("body %s: %v", body, err)
			}
			s0 := a.Statuses[0]
			if got := a.OverallCode + "/" + s0.Code + "/" + strconv.Itoa(s0.LimitRemaining); got != tt.wantJSON {
				t.Errorf("got %s, want %s (%s)", got, tt.wantJSON, body)
			}
			if s0.CurrentLimit.RequestsPerUnit != 2 || s0.CurrentLimit.Unit != "MINUTE" {
				t.Errorf("currentLimit %+v, want 2 per MINUTE (camelCase names)", s0.CurrentLimit)
			}
		})
	}
}

func TestJSONUnavailable(t *testing.T) {
	st := newStackOn(t, testConfig, Options{}, nil, true)
	code, body := st.do(t, "POST", "/json", `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)
	if code != 503 || body == "" {
		t.Errorf("/json with the backend down: %d %q, want 503 with a reason", code, body)
	}
	_, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "k", "v"))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC with the backend down: %v, want Unavailable", err)
	}
}

// TestNoRLConfigOnServingPort: the configuration dump is on the admin
// listener only, as the reference keeps it on its debug port.
func TestNoRLConfigOnServingPort(t *testing.T) {
	st := newStack(t, testConfig, Options{}, nil)
	if code, body := st.do(t, "GET", "/rlconfig", ""); code != 404 {
		t.Errorf("/rlconfig on the serving port: %d %q, want 404", code, body)
	}
}

func TestExtraHandler(t *testing.T) {
	st := newStack(t, testConfig, Options{}, nil)
	st.srv.Handle("/metrics", httpText("metrics here"))
	if code, body := st.do(t, "GET", "/metrics", ""); code != 200 || body != "metrics here" {
		t.Errorf("/metrics: %d %q", code, body)
	}
}

func TestGracefulShutdown(t *testing.T) {
	var g *gate
	st := newStack(t, testConfig, Options{}, func(inner rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceServer {
		g = newGate(inner)
		return g
	})
	defer g.open()
	if code, body := st.do(t, "GET", "/healthcheck", ""); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck before shutdown: %d %q", code, body)
	}

	client := rlsv3.NewRateLimitServiceClient(st.conn(t))
	type result struct {
		resp *rlsv3.RateLimitResponse
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := client.ShouldRateLimit(context.Background(), request("api", "k", "v"))
		inflight <- result{resp, err}
	}()
	<-g.entered

	served := make(chan error, 1)
	go func() { served <- st.stop() }()

	// While the call is in flight, health fails and nothing new connects
	// to gRPC; HTTP still answers, with 500.
	waitFor(t, "/healthcheck to fail", func() bool {
		code, _ := st.do(t, "GET", "/healthcheck", "")
		return code == 500
	})
	waitFor(t, "the gRPC listener to close", func() bool {
		c, err := net.DialTimeout("tcp", st.srv.GRPCAddr(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a call in flight", err)
	default:
	}

	g.open()
	r := <-inflight
	if r.err != nil || r.resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("in-flight call: %v, %v; want OK", r.resp.GetOverallCode(), r.err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Until(t, 10*time.Second, what, cond)
}

// A server stopped right after it starts (a context cancelled before the
// gRPC goroutine reached Serve) shuts down cleanly: no "server has been
// stopped" error from a race between Serve and the shutdown.
func TestStopRightAfterStart(t *testing.T) {
	for i := range 50 {
		st := newStack(t, testConfig, Options{}, nil)
		if err := st.stop(); err != nil {
			t.Fatalf("round %d: Serve: %v", i, err)
		}
	}
}
