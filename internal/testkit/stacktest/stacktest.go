package stacktest

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// QuietLogger returns a logger that discards everything.
func QuietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// ParseConfig builds a config from YAML files (named config0.yaml,
// config1.yaml, ...); a file holding a stream ("---" lines) is split into
// one file per document, since a file holds one domain. It fails t if they
// do not parse, warn, or do not combine.
func ParseConfig(t testing.TB, yamls ...string) *descriptor.Config {
	t.Helper()
	var domains []*descriptor.Domain
	for i, y := range yamls {
		for j, doc := range strings.Split("\n"+y, "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			ds, err := descriptor.Parse(fmt.Sprintf("config%d_%d.yaml", i, j), []byte(doc))
			if err != nil {
				t.Fatalf("parse config %d: %v", i, err)
			}
			domains = append(domains, ds...)
		}
	}
	c, err := descriptor.NewConfig(domains...)
	if err != nil {
		t.Fatalf("build config: %v", err)
	}
	if w := c.Warnings(); len(w) > 0 {
		t.Fatalf("config warnings: %q", w)
	}
	return c
}

// Memory returns a memory backend with opts, closed when t ends.
func Memory(t testing.TB, opts memory.Options) *memory.Backend {
	t.Helper()
	b := memory.New(opts)
	t.Cleanup(func() { b.Close() })
	return b
}

// ErrRedisDown is the error FailingBackend users pass to play an
// unreachable Redis: it wraps backend.ErrUnavailable.
var ErrRedisDown = fmt.Errorf("redis 127.0.0.1:1: connection refused: %w", backend.ErrUnavailable)

// FailingBackend fails every check, and Ping, with Err, as an unreachable
// store does.
type FailingBackend struct {
	// Err is every result's error.
	Err error
}

// Decide answers every check with f.Err.
func (f FailingBackend) Decide(_ context.Context, checks []backend.Check) []backend.Result {
	res := make([]backend.Result, len(checks))
	for i := range res {
		res[i].Err = f.Err
	}
	return res
}

// Ping returns f.Err.
func (f FailingBackend) Ping(context.Context) error { return f.Err }

// Close does nothing.
func (f FailingBackend) Close() error { return nil }

// Together gives a backend a counted DecideTogether (the optional
// backend.TogetherDecider), for tests of what uses one. While Decline is
// set it declines every call, deciding nothing; otherwise Decider decides
// the checks together or, when Decider is nil, Backend's Decide does.
// Calls counts the DecideTogether calls, declined ones included. It is
// not safe for concurrent use.
type Together struct {
	backend.Backend
	// Decider, when not nil, answers the calls that are not declined.
	Decider backend.TogetherDecider
	// Decline makes every call decline.
	Decline bool
	// Calls is the number of DecideTogether calls so far.
	Calls int
}

// DecideTogether counts the call, then declines it or decides checks.
func (b *Together) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	b.Calls++
	if b.Decline {
		return nil, false
	}
	if b.Decider != nil {
		return b.Decider.DecideTogether(ctx, checks)
	}
	return b.Decide(ctx, checks), true
}

// Request builds a request for domain with the descriptors ds.
func Request(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// Descriptor builds a descriptor from key, value pairs; an odd trailing
// key is ignored.
func Descriptor(kv ...string) *rlv3.RateLimitDescriptor {
	out := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// WithAddend sets d's hits_addend to n and returns d.
func WithAddend(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// Struct builds the protobuf Struct of m (a descriptor's metadata, say),
// failing t on a value a Struct cannot hold.
func Struct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Stack is a server.Server serving a RateLimitService on 127.0.0.1 ports,
// and a gRPC client connected to it.
type Stack struct {
	// Server serves gRPC and HTTP; its addresses are GRPCAddr and HTTPAddr.
	Server *server.Server
	// Conn is the client connection to Server's gRPC port.
	Conn *grpc.ClientConn
	// Client is a RateLimitService client on Conn.
	Client rlsv3.RateLimitServiceClient
}

// Serve serves svc on free 127.0.0.1 gRPC and HTTP ports and connects a
// client. When t ends it closes the client, then shuts the server down
// gracefully and fails t if Serve returned an error. Cleanups registered
// before Serve (closing backends, say) run after that.
func Serve(t testing.TB, svc rlsv3.RateLimitServiceServer) *Stack {
	t.Helper()
	srv, err := server.New(server.Options{
		GRPCAddr:        "127.0.0.1:0",
		HTTPAddr:        "127.0.0.1:0",
		Service:         svc,
		Logger:          QuietLogger(),
		ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatalf("dial %s: %v", srv.GRPCAddr(), err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &Stack{Server: srv, Conn: conn, Client: rlsv3.NewRateLimitServiceClient(conn)}
}

// ServeGRPCAddr serves srv, a bare gRPC server with whatever options and
// services a test gave it, on a free 127.0.0.1 port until t ends, and
// returns the address.
func ServeGRPCAddr(t testing.TB, srv *grpc.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// ServeGRPC serves srv as ServeGRPCAddr does and returns a client
// connection to it, closed when t ends.
func ServeGRPC(t testing.TB, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	addr := ServeGRPCAddr(t, srv)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
