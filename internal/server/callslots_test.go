package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Connections whose calls send their headers and never their request
// message take every slot of MaxInFlight: every real call is shed and
// gRPC health says NOT_SERVING. Within RequestTimeout the held calls are
// cancelled and their streams ended, their slots given back, counted, and
// real calls are answered again; health is SERVING again. (The bound is
// short so that the test waits for it only; nothing sleeps.)
func TestGRPCStalledCallsReset(t *testing.T) {
	const bound, conns = 8, 2
	log, logs := bufferLogger()
	st := newStack(t, testConfig, Options{Logger: log, GRPCLimits: GRPCLimits{
		MaxInFlight: bound, RequestTimeout: 500 * time.Millisecond,
	}}, nil)
	var held []*rawConn
	for range conns {
		c := dialRaw(t, st.srv.GRPCAddr())
		c.open(t, bound/conns, shouldRateLimit)
		held = append(held, c)
	}
	client := rlsv3.NewRateLimitServiceClient(st.conn(t))
	health := healthpb.NewHealthClient(st.conn(t))
	// Either the stalled calls still hold every slot (the real call is
	// shed, health says so) or they have been cancelled already: only
	// the first is a state the test can look at before the bound, and
	// the bound is what the test waits for either way.
	if _, err := client.ShouldRateLimit(context.Background(), request("api", "k", "v")); err != nil {
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call while the stalled ones hold every slot: %v, want ResourceExhausted", err)
		}
		h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || (h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING && st.srv.Load().InFlight == bound) {
			t.Fatalf("health while every call is shed: %v %v, want NOT_SERVING", h, err)
		}
	}
	waitFor(t, "the stalled calls cancelled", func() bool {
		l := st.srv.Load()
		return l.RequestTimeouts == bound && l.InFlight == 0
	})
	for i, c := range held {
		c.waitFor(t, "the stalled streams ended", func() bool {
			ended := c.resets[http2.ErrCodeNo] + c.resets[http2.ErrCodeCancel]
			return c.statuses[fmt.Sprint(int(codes.Canceled))] == bound/conns && ended == bound/conns
		})
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			t.Errorf("connection %d closed: only its stalled calls should end", i)
		}
	}
	resp, err := client.ShouldRateLimit(context.Background(), request("api", "k", "v"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("call after the stalled ones were cancelled: %v %v", resp.GetOverallCode(), err)
	}
	waitFor(t, "health SERVING again", func() bool {
		h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	if out := logs.String(); !strings.Contains(out, "SLUICE_GRPC_REQUEST_TIMEOUT") {
		t.Errorf("log does not name the request timeout:\n%s", out)
	}
	// A call whose message comes in time is not cancelled, however long
	// it then takes: the bound is on the request, not the answer.
	if l := st.srv.Load(); l.RequestTimeouts != bound {
		t.Errorf("request timeouts %d after real calls, want %d", l.RequestTimeouts, bound)
	}
}

// A health Watch (a streaming call) whose request arrives is not cancelled
// by RequestTimeout: its timer stops at its first message.
func TestGRPCRequestTimeoutSparesWatch(t *testing.T) {
	st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxInFlight: 8, RequestTimeout: 200 * time.Millisecond}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := healthpb.NewHealthClient(st.conn(t)).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := w.Recv(); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch answer: %v %v", h, err)
	}
	// A stalled call on another connection is cancelled after the bound:
	// once it is, the watch has lived past the bound as well.
	c := dialRaw(t, st.srv.GRPCAddr())
	c.open(t, 1, shouldRateLimit)
	// The count goes up before the cancelled call's slot is released (by
	// its context's AfterFunc): wait for both.
	waitFor(t, "the stalled call cancelled", func() bool { return st.srv.Load().RequestTimeouts == 1 })
	waitFor(t, "the stalled call's slot released, the watch's kept", func() bool { return st.srv.Load().InFlight == 1 })
	st.srv.SetServing(false)
	if h, err := w.Recv(); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch after the bound: %v %v, want NOT_SERVING sent on the live stream", h, err)
	}
}

// One connection holds at most MaxInFlightPerConnection calls: the calls
// it opens beyond are answered ResourceExhausted at once and counted,
// while other connections are served from the bound left.
func TestGRPCConnectionShare(t *testing.T) {
	const bound, share, opened = 16, 4, 10
	st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxInFlight: bound, MaxInFlightPerConnection: share}}, nil)
	c := dialRaw(t, st.srv.GRPCAddr())
	c.open(t, opened, shouldRateLimit)
	c.waitFor(t, "the calls beyond the share answered", func() bool {
		return c.statuses[fmt.Sprint(int(codes.ResourceExhausted))] == opened-share
	})
	if l := st.srv.Load(); l.InFlight != share || l.ShedConnection != opened-share || l.Shed != 0 || l.Saturated {
		t.Fatalf("load %+v, want %d in flight, %d shed for the connection's share, none for the bound", l, share, opened-share)
	}
	resp, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "k", "v"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("call on another connection: %v %v", resp.GetOverallCode(), err)
	}
	c.nc.Close()
	waitFor(t, "the connection's calls released", func() bool { return st.srv.Load().InFlight == 0 })
}

// A client that opens calls and resets each at once, before its request
// (HTTP/2's rapid reset: each costs the server the call's setting up and
// the client nothing), has its connection closed once it passes
// MaxEarlyResetsPerSecond within a second; other connections are served.
// (The bound is a count per second: 2,000 resets sent back to back pass
// 20 in some second however slow the machine.)
func TestGRPCRapidResetClosed(t *testing.T) {
	const bound, sent = 20, 2000
	log, logs := bufferLogger()
	st := newStack(t, testConfig, Options{Logger: log, GRPCLimits: GRPCLimits{MaxInFlight: 100, MaxEarlyResetsPerSecond: bound}}, nil)
	c := dialRaw(t, st.srv.GRPCAddr())
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "raw"}, {":path", shouldRateLimit},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for id := uint32(1); id < 2*sent; id += 2 {
		err := c.write(func() error {
			if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b.Bytes(), EndHeaders: true}); err != nil {
				return err
			}
			return c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		})
		if err != nil {
			break // the server closed the connection
		}
	}
	c.waitFor(t, "the connection closed", func() bool { return c.closed })
	if n := st.srv.Load().ResetConnectionsClosed; n < 1 {
		t.Errorf("connections closed for resets: %d, want at least 1 (a connection closing on its own while its reset calls are cleaned up may count too)", n)
	}
	waitFor(t, "the reset calls' slots given back", func() bool { return st.srv.Load().InFlight == 0 })
	resp, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "k", "v"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("call on another connection: %v %v", resp.GetOverallCode(), err)
	}
	if !strings.Contains(logs.String(), "SLUICE_GRPC_MAX_EARLY_RESETS_PER_SECOND") {
		t.Errorf("no warning naming the setting:\n%s", logs.String())
	}
}
