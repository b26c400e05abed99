package main

import (
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluice-rl/sluice/internal/testkit/h2test"
)

// By default the gRPC listener's flow-control windows are fixed: a
// stream's is the largest request sluice accepts within 64 KiB to 1 MiB,
// the connection's 1 MiB, and the server sends no bandwidth-estimation PING (gRPC's
// dynamic windows send one, with a WINDOW_UPDATE, per round trip on every
// connection, which Envoy must answer).
func TestGRPCStaticWindows(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(10))
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for _, tc := range []struct {
		name    string
		env     []string
		want    h2test.Seen
		dynamic bool
	}{
		{name: "default", want: h2test.Seen{InitialWindow: 1 << 20, ConnIncrement: 1<<20 - 65535}},
		{name: "the incumbent's request bound, explicitly", env: []string{"SLUICE_MAX_REQUEST_BYTES=4194304"},
			want: h2test.Seen{InitialWindow: 1 << 20, ConnIncrement: 1<<20 - 65535}},
		{name: "a request bound of 1 MiB", env: []string{"SLUICE_MAX_REQUEST_BYTES=1048576"},
			want: h2test.Seen{InitialWindow: 1 << 20, ConnIncrement: 1<<20 - 65535}},
		{name: "a request bound of 512 KiB", env: []string{"SLUICE_MAX_REQUEST_BYTES=524288"},
			want: h2test.Seen{InitialWindow: 512 << 10, ConnIncrement: 1<<20 - 65535}},
		{name: "a request bound below 64 KiB", env: []string{"SLUICE_MAX_REQUEST_BYTES=4096"},
			want: h2test.Seen{InitialWindow: 64 << 10, ConnIncrement: 1<<20 - 65535}},
		{name: "dynamic windows", env: []string{"SLUICE_GRPC_STATIC_WINDOWS=false"}, dynamic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, append([]string{"SLUICE_CONFIG=" + dir, "SLUICE_ADMIN_ADDR=off"}, tc.env...))
			got, err := h2test.Call(s.grpc, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.dynamic {
				// gRPC's own: HTTP/2's default window, and a PING on the first data.
				if got.InitialWindow != 65535 || got.Pings == 0 {
					t.Errorf("with dynamic windows saw %+v, want the default window and a PING", got)
				}
				return
			}
			if got != tc.want {
				t.Errorf("saw %+v, want %+v", got, tc.want)
			}
		})
	}
}
