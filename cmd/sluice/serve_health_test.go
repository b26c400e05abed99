package main

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true: health fails while the
// config has no domain and follows reloads, as in the reference.
func TestServeHealthyWithAtLeastOneConfig(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "SLUICE_RELOAD_INTERVAL=20ms", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"})
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grpcHealth := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	if code, _ := s.get(t, "/healthcheck"); code != 500 {
		t.Errorf("/healthcheck with no domain: %d, want 500", code)
	}
	if st := grpcHealth(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health with no domain: %v, want NOT_SERVING", st)
	}
	writeConfig(t, dir, "api.yaml", yearly(1))
	waitFor(t, "health after a domain is loaded", func() bool {
		code, _ := s.get(t, "/healthcheck")
		return code == 200
	})
	if st := grpcHealth(); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health with a domain: %v, want SERVING", st)
	}
}
