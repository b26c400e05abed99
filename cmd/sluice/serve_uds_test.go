package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// shortTempDir is a temporary directory with a path short enough for a
// unix socket (108 bytes), which t.TempDir's may not be.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// GRPC_UDS makes gRPC listen on a unix socket, as the reference does: a
// real gRPC client reaches the rate-limit and health services through it.
func TestServeGRPCUnixSocket(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	sock := filepath.Join(shortTempDir(t), "rls.sock")
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "GRPC_UDS=" + sock})
	if s.grpc != sock {
		t.Errorf("gRPC listens on %q, want the socket %q", s.grpc, sock)
	}
	if log := s.stderr.String(); strings.Contains(log, "GRPC_UDS") && strings.Contains(log, "ignoring") {
		t.Errorf("GRPC_UDS reported as ignored:\n%s", log)
	}
	if log := s.stderr.String(); !strings.Contains(log, "listeners: gRPC unix:"+sock+" (plain)") {
		t.Errorf("the listeners line does not name the socket:\n%s", log)
	}

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
	}}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("call %d over the socket: %v", i+1, err)
		}
		if resp.OverallCode != want {
			t.Errorf("call %d: %v, want %v", i+1, resp.OverallCode, want)
		}
	}
	for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q over the socket: %v %v, want SERVING", name, resp.GetStatus(), err)
		}
	}
	if code := s.stop(t); code != 0 {
		t.Errorf("serve exit %d", code)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left after shutdown: %v", err)
	}
}

// A socket path that holds another file, or a socket another process
// serves, stops the start; a stale socket is replaced.
func TestServeGRPCUnixSocketInUse(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	tmp := shortTempDir(t)

	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(tmp, "busy.sock")
	ln, err := net.Listen("unix", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct{ path, want string }{
		{file, "is not a socket"},
		{busy, "in use by another process"},
	} {
		code, _, errOut := runCmd(t, append(loopback, "SLUICE_CONFIG="+dir, "GRPC_UDS="+tc.path), "serve")
		if code != exitError || !strings.Contains(errOut, tc.want) {
			t.Errorf("GRPC_UDS=%s: exit %d, want %d with %q:\n%s", tc.path, code, exitError, tc.want, errOut)
		}
	}

	stale := filepath.Join(tmp, "stale.sock")
	sl, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	sl.(*net.UnixListener).SetUnlinkOnClose(false)
	sl.Close()
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "GRPC_UDS=" + stale})
	if s.grpc != stale {
		t.Errorf("gRPC listens on %q, want %q", s.grpc, stale)
	}
}
