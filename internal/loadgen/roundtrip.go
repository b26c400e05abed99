package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RoundTrip is a RateLimitService that answers as Noop does, each call
// only once Redis has answered a command sent for it, and does nothing
// else: no matching, no decision, no key. It is the reference for what a
// Redis round trip alone costs on the machine it runs on: what a service
// that asks Redis once per decision, and does nothing with the answer,
// reaches there.
//
// Calls that wait together share a round trip, as a Redis-backed service
// that coalesces its requests (sluice) shares a pipeline: its lane
// goroutines, each with a connection of its own, send the round trips;
// each sends one for every call waiting when it starts, so at most one
// per lane is in flight and a call that arrives while every lane is busy waits
// for the next. The command is ECHO, a data command that does no work,
// so that INFO commandstats counts the round trips. It is safe for
// concurrent use.
type RoundTrip struct {
	rlsv3.UnimplementedRateLimitServiceServer
	noop    *Noop
	addr    string
	timeout time.Duration
	wake    chan struct{} // a token per lane at most: calls are waiting
	done    chan struct{} // closed by Close
	stopped sync.WaitGroup

	mu      sync.Mutex
	waiting []chan error
	spare   []chan error // a batch slice a lane handed back, reused
	taken   int          // calls handed to a round trip so far (for tests)
	waiters sync.Pool    // of chan error, buffered 1
}

// rtLane is one connection to Redis and its reply buffer.
type rtLane struct {
	conn net.Conn
	buf  [64]byte
}

// echoCommand is the command of a round trip (never modified), and
// echoReply Redis's answer to it.
var (
	echoCommand = []byte("*2\r\n$4\r\nECHO\r\n$1\r\n1\r\n")
	echoReply   = []byte("$1\r\n1\r\n")
)

// DefaultRoundTripLanes is how many round trips a RoundTrip has in flight
// at most, as many as sluice's pipelines per Redis node.
const DefaultRoundTripLanes = 2

// NewRoundTrip returns a RoundTrip to the Redis at addr (host:port) with
// lanes lanes, whose connections are dialled when first used; a round
// trip that takes longer than timeout fails its calls with Unavailable.
// Close stops it.
func NewRoundTrip(addr string, lanes int, timeout time.Duration) *RoundTrip {
	lanes = max(lanes, 1)
	r := &RoundTrip{noop: NewNoop(), addr: addr, timeout: timeout,
		wake: make(chan struct{}, lanes), done: make(chan struct{})}
	r.waiters.New = func() any { return make(chan error, 1) }
	r.stopped.Add(lanes)
	for range lanes {
		go r.lane()
	}
	return r
}

// ShouldRateLimit answers as Noop does once a round trip sent after the
// call arrived has come back, or fails with Unavailable when it failed.
func (r *RoundTrip) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	w := r.waiters.Get().(chan error)
	r.mu.Lock()
	r.waiting = append(r.waiting, w)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default: // every lane already has a token: one will look
	}
	select {
	case err := <-w:
		r.waiters.Put(w)
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return r.noop.ShouldRateLimit(ctx, req)
	case <-ctx.Done():
		// w is answered later, by the round trip it is part of, and then
		// dropped: buffered, it never blocks that round trip.
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-r.done:
		return nil, status.Error(codes.Unavailable, "closed")
	}
}

// lane sends round trips, each for every call waiting when it starts,
// whenever woken, until none waits. A call queued after its last look
// left a token in wake (or found every lane holding one), so some lane
// looks again.
func (r *RoundTrip) lane() {
	defer r.stopped.Done()
	l := &rtLane{}
	defer l.close()
	for {
		select {
		case <-r.wake:
		case <-r.done:
			return
		}
		for {
			r.mu.Lock()
			batch := r.waiting
			r.waiting, r.spare = r.spare, nil
			r.taken += len(batch)
			r.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			err := l.roundTrip(r.addr, r.timeout)
			for i, w := range batch {
				w <- err
				batch[i] = nil
			}
			r.mu.Lock()
			if r.spare == nil {
				r.spare = batch[:0]
			}
			r.mu.Unlock()
		}
	}
}

// roundTrip sends one ECHO and reads its answer, dialling first when the
// lane has no connection; on any failure it drops the connection.
func (l *rtLane) roundTrip(addr string, timeout time.Duration) error {
	if l.conn == nil {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return fmt.Errorf("redis %s: %w", addr, err)
		}
		l.conn = c
	}
	err := l.exchange(timeout)
	if err != nil {
		l.close()
		return fmt.Errorf("redis %s: %w", addr, err)
	}
	return nil
}

// exchange writes the command and reads exactly the expected answer.
func (l *rtLane) exchange(timeout time.Duration) error {
	if err := l.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := l.conn.Write(echoCommand); err != nil {
		return err
	}
	n := 0
	for n < len(echoReply) {
		m, err := l.conn.Read(l.buf[n:len(echoReply)])
		if err != nil {
			return err
		}
		n += m
	}
	if !bytes.Equal(l.buf[:n], echoReply) {
		return fmt.Errorf("unexpected answer to ECHO: %q", l.buf[:n])
	}
	return nil
}

// close drops the lane's connection.
func (l *rtLane) close() {
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
}

// Close stops the lanes and closes their connections; calls still
// waiting fail with Unavailable.
func (r *RoundTrip) Close() {
	close(r.done)
	r.stopped.Wait()
}

// NewRoundTripServer returns a gRPC server with rt registered, ready to
// Serve, built as NewNoopServer builds the no-op's.
func NewRoundTripServer(rt *RoundTrip, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append(ServerWindows(), opts...)...)
	rlsv3.RegisterRateLimitServiceServer(s, rt)
	return s
}
