// Package xdstest runs a real xDS management server for tests:
// go-control-plane's State-of-the-World server over its snapshot cache, on
// a loopback port in the test process, serving RateLimitConfig resources as
// Envoy Gateway does. It records every request its clients send, so a test
// can wait for the ACK or NACK of a version.
//
// A typical test:
//
//	srv := xdstest.Start(t, xdstest.Options{})
//	srv.Set(t, "envoy-ratelimit", "1", conf)
//	srv.WaitACK(t, "1")
//	srv.Stop()             // the management server goes away
//	srv.Restart(t)         // same address, empty cache, as after a real restart
package xdstest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// WaitTimeout bounds every Wait method.
const WaitTimeout = 20 * time.Second

// Options configure a Server.
type Options struct {
	// Addr is the listen address; "" means 127.0.0.1 on a free port.
	Addr string
	// TLS, when not nil, serves over TLS with it (set ClientAuth and
	// ClientCAs to require client certificates, as Envoy Gateway does).
	TLS *tls.Config
}

// Request is one DiscoveryRequest a client sent, with the version of the
// response it answers (by nonce), "" for a subscription.
type Request struct {
	*discoveryv3.DiscoveryRequest
	// Answers is the version_info of the response whose nonce the request
	// carries; "" for the first request of a stream.
	Answers string
}

// IsACK reports whether r accepts the response it answers.
func (r Request) IsACK() bool { return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil }

// IsNACK reports whether r rejects the response it answers.
func (r Request) IsNACK() bool { return r.GetResponseNonce() != "" && r.GetErrorDetail() != nil }

// Server is a running management server.
type Server struct {
	opts Options
	addr string

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every new request or stream
	grpc     *grpc.Server
	cache    cachev3.SnapshotCache
	requests []Request
	nonces   map[string]string // response nonce → version
	streams  int               // streams opened, over all runs
	open     int               // streams open now
	headers  []metadata.MD     // each stream's request metadata
	done     chan struct{}     // closed when the current run's Serve returns
}

// Start starts a server; it is stopped when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{opts: opts, addr: opts.Addr, nonces: map[string]string{}, changed: make(chan struct{})}
	if s.addr == "" {
		s.addr = "127.0.0.1:0"
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Addr is the address the server listens on, host:port.
func (s *Server) Addr() string { return s.addr }

// start listens on s.addr with a new gRPC server and an empty cache.
func (s *Server) start() error {
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("xdstest: listen on %s: %w", s.addr, err)
	}
	s.addr = l.Addr().String()
	var opts []grpc.ServerOption
	if s.opts.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	g := grpc.NewServer(opts...)
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.note(func() { s.streams++; s.open++; s.headers = append(s.headers, md) })
			return nil
		},
		StreamClosedFunc: func(int64, *corev3.Node) { s.note(func() { s.open-- }) },
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			s.note(func() {
				s.requests = append(s.requests, Request{DiscoveryRequest: req, Answers: s.nonces[req.GetResponseNonce()]})
			})
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			s.note(func() { s.nonces[resp.GetNonce()] = resp.GetVersionInfo() })
		},
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), cache, cb))
	done := make(chan struct{})
	s.mu.Lock()
	s.grpc, s.cache, s.done = g, cache, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		_ = g.Serve(l)
	}()
	return nil
}

// note runs f under the lock and wakes the waiters.
func (s *Server) note(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// Set serves confs as version for the node id.
func (s *Server) Set(t testing.TB, nodeID, version string, confs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]cachetypes.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]cachetypes.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		t.Fatalf("xdstest: snapshot %s: %v", version, err)
	}
	s.mu.Lock()
	cache := s.cache
	s.mu.Unlock()
	if err := cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		t.Fatalf("xdstest: set snapshot %s: %v", version, err)
	}
}

// Stop stops the server at once, closing every stream, as a management
// server that crashed or was rolled. It is safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	g, done := s.grpc, s.done
	s.mu.Unlock()
	g.Stop()
	<-done
}

// Restart starts the server again on the same address with an empty
// cache, as a restarted management server.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Streams returns how many streams were opened so far and how many are
// open now.
func (s *Server) Streams() (opened, open int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams, s.open
}

// Headers returns the gRPC metadata of every stream opened so far.
func (s *Server) Headers() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metadata.MD(nil), s.headers...)
}

// WaitFor waits until cond holds, re-checking it after every request and
// stream change; it fails t after WaitTimeout.
func (s *Server) WaitFor(t testing.TB, what string, cond func(s *Server) bool) {
	t.Helper()
	deadline := time.After(WaitTimeout)
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if cond(s) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("xdstest: no %s after %v; requests:\n%s", what, WaitTimeout, s.describe())
		}
	}
}

// WaitACK waits for a client to accept version.
func (s *Server) WaitACK(t testing.TB, version string) {
	t.Helper()
	s.WaitFor(t, "ACK of version "+version, func(s *Server) bool {
		for _, r := range s.Requests() {
			if r.IsACK() && r.Answers == version && r.GetVersionInfo() == version {
				return true
			}
		}
		return false
	})
}

// WaitNACK waits for a client to reject version and returns the NACK.
func (s *Server) WaitNACK(t testing.TB, version string) Request {
	t.Helper()
	var nack Request
	s.WaitFor(t, "NACK of version "+version, func(s *Server) bool {
		for _, r := range s.Requests() {
			if r.IsNACK() && r.Answers == version {
				nack = r
				return true
			}
		}
		return false
	})
	return nack
}

// describe lists the requests for a failure message.
func (s *Server) describe() string {
	var out string
	for _, r := range s.Requests() {
		kind := "subscribe"
		switch {
		case r.IsACK():
			kind = "ACK"
		case r.IsNACK():
			kind = "NACK " + r.GetErrorDetail().GetMessage()
		}
		out += fmt.Sprintf("  node=%s version=%q answers=%q %s\n", r.GetNode().GetId(), r.GetVersionInfo(), r.Answers, kind)
	}
	return out
}

// PerMinute is a resource of one domain limiting key (any value) to n per
// minute.
func PerMinute(domain, key string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}
