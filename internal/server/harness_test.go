package server

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// testConfig limits k=<any> in domain "api" to 2 per minute.
const testConfig = `domain: api
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// stack is a real service on the memory backend, with a stopped clock,
// behind a Server listening on 127.0.0.1 ports.
type stack struct {
	srv     *Server
	svc     *service.Service
	cancel  context.CancelFunc
	served  chan error // Serve's result
	stopped bool
}

// newStack loads yaml from a config directory, builds the service and the
// server (opts.Service, when set, wraps the real service: see wrap) and
// starts serving. The server is shut down at cleanup.
func newStack(t *testing.T, yaml string, opts Options, wrap func(rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceServer) *stack {
	t.Helper()
	return newStackOn(t, yaml, opts, wrap, false)
}

// newStackOn is newStack; with deadBackend the memory backend is closed
// before serving, so every decision fails as with an unreachable Redis.
func newStackOn(t *testing.T, yaml string, opts Options, wrap func(rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceServer, deadBackend bool) *stack {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptor.Load(descriptor.LoadOptions{}, dir)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	now := time.Date(2027, 1, 4, 10, 0, 30, 0, time.UTC) // the clock stands still: no window ends mid-test
	mem := memory.New(memory.Options{Now: func() time.Time { return now }})
	t.Cleanup(func() { mem.Close() })
	if deadBackend {
		mem.Close() // later decisions fail with backend.ErrUnavailable
	}
	svc := service.New(service.Options{Backend: mem, Logger: quietLogger()})
	svc.SetConfig(cfg)

	opts.GRPCAddr, opts.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	opts.Service = svc
	if wrap != nil {
		opts.Service = wrap(svc)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &stack{srv: srv, svc: svc, cancel: cancel, served: make(chan error, 1)}
	go func() { st.served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		if err := st.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return st
}

// stop cancels Serve and returns its result (once; later calls return nil).
func (s *stack) stop() error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	s.cancel()
	select {
	case err := <-s.served:
		return err
	case <-time.After(30 * time.Second):
		return context.DeadlineExceeded
	}
}

// conn dials the gRPC server in plain text.
func (s *stack) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// do sends a method request for path with body and returns status and body.
func (s *stack) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	return testenv.HTTPDo(t, method, "http://"+s.srv.HTTPAddr()+path, body)
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// request builds a request for one descriptor of key=value pairs.
func request(domain string, kv ...string) *rlsv3.RateLimitRequest {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d}}
}

// gate holds every ShouldRateLimit call until released, to test what
// happens while calls are in flight.
type gate struct {
	rlsv3.RateLimitServiceServer
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate(inner rlsv3.RateLimitServiceServer) *gate {
	return &gate{RateLimitServiceServer: inner, entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gate) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.RateLimitServiceServer.ShouldRateLimit(ctx, req)
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// httpText is a handler answering a fixed text.
type httpText string

func (h httpText) ServeHTTP(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, string(h)) }
