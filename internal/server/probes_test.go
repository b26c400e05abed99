package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// dialFrom connects to addr from the loopback address from (127.0.0.x:
// every address of 127/8 is the loopback interface's), closed at cleanup.
func dialFrom(t *testing.T, from, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// holdIdle opens n connections to l from each of the addresses from,
// sending nothing, and returns how many l accepted, once l has accepted
// or refused each.
func holdIdle(t *testing.T, l *limitListener, n int, from ...string) int {
	t.Helper()
	open, refused := l.open.Load(), l.refused.Load()
	for _, f := range from {
		for range n {
			if _, err := dialFrom(t, f, l.Addr().String()); err != nil {
				t.Fatal(err)
			}
		}
	}
	dialed := int64(n * len(from))
	waitFor(t, "every connection accepted or refused", func() bool {
		return l.open.Load()-open+int64(l.refused.Load()-refused) == dialed
	})
	return int(l.open.Load() - open)
}

// probeHTTP asks /healthcheck on a new connection from from, as the
// kubelet does (Connection: close), and returns the status (0: no answer)
// once the server has closed the connection.
func probeHTTP(t *testing.T, from, addr string) int {
	t.Helper()
	c, err := dialFrom(t, from, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthcheck HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n"); err != nil {
		return 0
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	io.Copy(io.Discard, r) // until the server's close: its place is free again
	return resp.StatusCode
}

// probeGRPC asks gRPC health on a new connection from from, and returns
// the status (or the error's text).
func probeGRPC(t *testing.T, from, addr string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err.Error()
	}
	return h.GetStatus().String()
}

// Probes stay answered whatever other clients hold: one client that opens
// as many idle connections as the listener allows holds only its
// address's share, and clients from many addresses that fill all the
// rest leave the last places to addresses holding none, where the
// kubelet's probes come from (it may run two or three at once). Every
// probe of 25 is answered, on the HTTP port (/healthcheck) and on the gRPC
// port (health).
func TestProbesAnsweredWhileConnectionsHeld(t *testing.T) {
	const max, perAddr, probes = 32, 8, 25
	const reserve = max / 16
	st := newStack(t, testConfig, Options{
		HTTPLimits: HTTPLimits{MaxConnections: max, MaxConnectionsPerAddress: perAddr},
		GRPCLimits: GRPCLimits{MaxConnections: max, MaxConnectionsPerAddress: perAddr},
	}, nil)
	httpLn := st.srv.httpLn.(*limitListener)
	for _, l := range []struct {
		name  string
		ln    *limitListener
		probe func() string
	}{
		{"HTTP", httpLn, func() string { return fmt.Sprint(probeHTTP(t, "127.0.0.2", st.srv.HTTPAddr())) }},
		{"gRPC", st.srv.grpcLimit, func() string {
			got := probeGRPC(t, "127.0.0.2", st.srv.GRPCAddr())
			// The kubelet probes every few seconds: by the next probe
			// the server has seen this one's connection close.
			waitFor(t, "the probe's connection released", func() bool { return st.srv.grpcLimit.open.Load() == max-reserve })
			return got
		}},
	} {
		want := map[string]string{"HTTP": "200", "gRPC": "SERVING"}[l.name]
		t.Run(l.name, func(t *testing.T) {
			// One client, one address: as many connections as the bound.
			if held := holdIdle(t, l.ln, max, "127.0.0.3"); held != perAddr {
				t.Fatalf("one address holds %d connections, want its share %d", held, perAddr)
			}
			// Clients from more addresses fill the rest but the reserve.
			more := holdIdle(t, l.ln, perAddr, "127.0.0.4", "127.0.0.5", "127.0.0.6")
			if total := perAddr + more; total != max-reserve {
				t.Fatalf("%d connections held over four addresses, want all but the reserve: %d", total, max-reserve)
			}
			answered := 0
			for range probes {
				if got := l.probe(); got == want {
					answered++
				}
			}
			if answered != probes {
				t.Fatalf("%d of %d probes answered %s while clients held every place but the reserve", answered, probes, want)
			}
		})
	}
	// The gRPC listener's refusals are counted with the rest.
	if l := st.srv.Load(); l.ConnectionsRefused == 0 {
		t.Errorf("no gRPC connection counted refused: %+v", l)
	}
}
