package integration

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
)

// TestReadOnlyAfterFailover fails over a standalone Redis the way a
// Kubernetes Service or a DNS name does: REDIS_URL names an address (here a
// loopback forwarder) that leads to the master a; a's replica b is
// promoted, a is made b's replica, and the address now leads to b. The
// connections sluice already holds still reach a, which refuses every
// write with READONLY. sluice must close each such connection on its first
// READONLY (the call on it fails with Unavailable), so that the pool dials
// the address again and reaches b: every stale connection fails at most
// one call, then decisions go on with the counts b replicated. The
// incumbent (open pull request #1191) does this with
// REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR=true; with it false its stale
// connections fail every write until it restarts. sluice recovers whatever
// the setting says (docs/migrating-from-envoy-ratelimit.md).
func TestReadOnlyAfterFailover(t *testing.T) {
	const limit = 100
	config := `domain: api
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 100}
`
	for _, tt := range []struct {
		name, setting string
	}{
		{"unset", ""},
		{"true", "true"},
		{"false", "false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := redistest.Standalone(t), redistest.Standalone(t)
			ac, bc := a.Client(), b.Client()
			ctx := ctxFor(t, 2*time.Minute)
			host, port, _ := net.SplitHostPort(a.Addr())
			if err := bc.ReplicaOf(ctx, host, port).Err(); err != nil {
				t.Fatal(err)
			}
			fw := newForwarder(t, a.Addr())
			env := map[string]string{
				"REDIS_TYPE": "single",
				"REDIS_URL":  fw.addr(),
				// A healthy round trip never fails on a loaded machine.
				"REDIS_TIMEOUT": "5s",
			}
			if tt.setting != "" {
				env["REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR"] = tt.setting
			}
			p := sluicetest.Start(t, sluicetest.Options{
				ConfigDir: configDir(t, map[string]string{"api.yaml": config}),
				Env:       env,
			})
			if want := "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR=" + tt.setting; tt.setting != "" && !strings.Contains(p.Logs(), want) {
				t.Errorf("the logs do not name %s:\n%s", want, p.Logs())
			}

			d := entries("k", sluicetest.Unique("readonly"))
			used := 0
			decide := func() (*rlsv3.RateLimitResponse, error) {
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				return p.ShouldRateLimit(cctx, "api", 1, d)
			}
			admitted := func(resp *rlsv3.RateLimitResponse) {
				t.Helper()
				used++
				s := resp.Statuses[0]
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || s.LimitRemaining != uint32(limit-used) {
					t.Fatalf("call %d: %v, remaining %d; want OK, remaining %d", used, resp.OverallCode, s.LimitRemaining, limit-used)
				}
			}
			for i := 0; i < 3; i++ {
				resp, err := decide()
				if err != nil {
					t.Fatalf("before the failover: %v", err)
				}
				admitted(resp)
			}
			// b holds every count a answered before the failover. WAIT waits
			// for the replication of its own client's last write, so this
			// client writes first: a's one replication stream carries
			// sluice's writes before it. (Without it WAIT can return while b
			// is still in its first sync, which REPLICAOF NO ONE then cuts.)
			if err := ac.Set(ctx, "readonly-test-replicated", "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := ac.Do(ctx, "WAIT", 1, 10000).Int(); err != nil || n < 1 {
				t.Fatalf("WAIT on a: %d replicas, %v", n, err)
			}
			stale := fw.open(a.Addr())
			if stale == 0 {
				t.Fatal("sluice holds no connection to a before the failover")
			}

			// The failover: b promoted, a demoted to its replica, the
			// address moved to b. a keeps the connections it has.
			if err := bc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
			host, port, _ = net.SplitHostPort(b.Addr())
			if err := ac.ReplicaOf(ctx, host, port).Err(); err != nil {
				t.Fatal(err)
			}
			fw.moveTo(b.Addr())

			failed, ok := 0, 0
			for ok < 5 {
				resp, err := decide()
				if err == nil {
					ok++
					admitted(resp)
					continue
				}
				failed++
				if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "READONLY") {
					t.Errorf("a call on a stale connection: %v; want Unavailable naming READONLY", err)
				}
				if failed > stale {
					t.Fatalf("%d calls failed after the failover, more than the %d connections sluice held to a: a connection refused READONLY was used again; last error: %v",
						failed, stale, err)
				}
			}
			if failed == 0 {
				t.Fatalf("no call reached a after the failover (%d connections to it were open): the test did not see READONLY", stale)
			}
			// Each connection whose call was refused is closed.
			testenv.Until(t, 30*time.Second, "the refused connections to a to be closed", func() bool {
				return fw.open(a.Addr()) <= stale-failed
			})
			t.Logf("%d connection(s) to the demoted master, %d call(s) failed READONLY, then decisions went on on the new master", stale, failed)
		})
	}
}

// forwarder is a loopback TCP forwarder standing for a name that follows a
// failover (a Kubernetes Service, a DNS record): each connection it
// accepts is joined to the target of the moment, and moving the target
// leaves the connections already made where they are.
type forwarder struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	target string
	conns  map[net.Conn]string // both sides of every joined pair → its target
	count  map[string]int      // open pairs by target
	closed bool
}

// newForwarder listens on a free loopback port and forwards to target
// until t ends.
func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]string{}, count: map[string]int{}}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

// moveTo makes target the destination of the connections accepted from
// now on.
func (f *forwarder) moveTo(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = target
}

// open is how many joined connections to target are open.
func (f *forwarder) open(target string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count[target]
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.mu.Lock()
		target := f.target
		f.mu.Unlock()
		out, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		f.conns[in], f.conns[out] = target, target
		f.count[target]++
		f.mu.Unlock()
		f.wg.Add(1)
		go f.join(in, out, target)
	}
}

// join copies both ways until either side ends, then closes both.
func (f *forwarder) join(in, out net.Conn, target string) {
	defer f.wg.Done()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // EOF, a reset or a close: the pair ends
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	_ = in.Close()
	_ = out.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, in)
	delete(f.conns, out)
	f.count[target]--
	f.mu.Unlock()
}

// close stops accepting, closes every joined connection and waits for
// the forwarder's goroutines.
func (f *forwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
