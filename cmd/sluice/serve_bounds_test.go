package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// serverSettings connects to the gRPC listener as a raw HTTP/2 client and
// returns the settings of the server's first SETTINGS frame.
func serverSettings(t *testing.T, addr string) map[http2.SettingID]uint32 {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(nc, nc)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			got := map[http2.SettingID]uint32{}
			sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			return got
		}
	}
}

// sluice serve advertises its per-connection stream bound and its header
// list bound by default, so that Envoy spreads calls over more
// connections instead of opening streams without end; 0 leaves each
// unadvertised, as gRPC (and the incumbent) does.
func TestGRPCBoundsAdvertised(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(10))
	for _, tc := range []struct {
		name             string
		env              []string
		streams, headers uint32 // 0: not sent
	}{
		{name: "defaults", streams: 1024, headers: 65536},
		{name: "set", env: []string{"SLUICE_GRPC_MAX_CONCURRENT_STREAMS=50", "SLUICE_GRPC_MAX_HEADER_LIST_BYTES=8192"}, streams: 50, headers: 8192},
		{name: "no bounds", env: []string{"SLUICE_GRPC_MAX_CONCURRENT_STREAMS=0", "SLUICE_GRPC_MAX_HEADER_LIST_BYTES=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, append([]string{"SLUICE_CONFIG=" + dir, "SLUICE_ADMIN_ADDR=off"}, tc.env...))
			got := serverSettings(t, s.grpc)
			if v := got[http2.SettingMaxConcurrentStreams]; v != tc.streams {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want %d", v, tc.streams)
			}
			if v := got[http2.SettingMaxHeaderListSize]; v != tc.headers {
				t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d, want %d", v, tc.headers)
			}
		})
	}
}

// Overload is loud: with SLUICE_MAX_IN_FLIGHT calls held open (streams a
// gRPC client opened and never sent a request on), the next call is
// answered ResourceExhausted at once, /metrics counts it, and a warning
// names the setting. Once the held calls end, calls are answered again.
func TestOverloadAnsweredAndSeen(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(10))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "SLUICE_MAX_IN_FLIGHT=2"})

	cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hold, release := context.WithCancel(context.Background())
	defer release()
	for range 2 {
		// A stream without its request: the server holds the call open
		// waiting for it.
		if _, err := cc.NewStream(hold, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"); err != nil {
			t.Fatal(err)
		}
	}
	metric := func(name string) float64 {
		f := s.scrapeMetrics(t)[name]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("/metrics has no single %s", name)
		}
		if g := f.Metric[0].GetGauge(); g != nil {
			return g.GetValue()
		}
		return f.Metric[0].GetCounter().GetValue()
	}
	waitFor(t, "the held calls in flight", func() bool { return metric("sluice_calls_in_flight") == 2 })

	client := rlClient(t, s.grpc)
	if _, err := client.ShouldRateLimit(context.Background(), kv("api", "v")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call beyond SLUICE_MAX_IN_FLIGHT: %v, want ResourceExhausted", err)
	}
	if n := metric("sluice_calls_shed_total"); n != 1 {
		t.Errorf("sluice_calls_shed_total %v, want 1", n)
	}
	if n := metric("sluice_grpc_connections"); n != 2 {
		t.Errorf("sluice_grpc_connections %v, want 2", n)
	}
	if out := s.stderr.String(); !strings.Contains(out, "calls in flight at their bound (SLUICE_MAX_IN_FLIGHT)") {
		t.Errorf("no warning naming SLUICE_MAX_IN_FLIGHT:\n%s", out)
	}

	release()
	waitFor(t, "the held calls ended", func() bool { return metric("sluice_calls_in_flight") == 0 })
	if _, err := client.ShouldRateLimit(context.Background(), kv("api", "v")); err != nil {
		t.Fatalf("call once the held calls ended: %v", err)
	}
}
