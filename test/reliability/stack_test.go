package reliability

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// stack is one in-process sluice: a Service on a backend, behind a
// server.Server on 127.0.0.1 ports, and a gRPC client connected to it.
type stack struct {
	svc *service.Service
	*stacktest.Stack
}

// startStack serves opts (whose Backend is required) with the config
// parsed from yamls, and stops everything when t ends: the client, then
// the server (gracefully), then the backends.
func startStack(t testing.TB, opts service.Options, yamls ...string) *stack {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = stacktest.QuietLogger()
	}
	st := &stack{svc: service.New(opts)}
	if len(yamls) > 0 {
		st.svc.SetConfig(stacktest.ParseConfig(t, yamls...))
	}
	// Registered before Serve's cleanup, so it runs after the server is down.
	t.Cleanup(func() {
		for _, b := range []backend.Backend{opts.Backend, opts.Local} {
			if b != nil {
				b.Close()
			}
		}
	})
	st.Stack = stacktest.Serve(t, st.svc)
	return st
}

// newMemory returns a memory backend on the real clock.
func newMemory() *memory.Backend { return memory.New(memory.Options{}) }

// newRedis returns a Redis backend; the stack (or t's cleanup) closes it.
func newRedis(t testing.TB, opts redis.Options) *redis.Backend {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = stacktest.QuietLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := redis.New(ctx, opts)
	if err != nil {
		t.Fatalf("redis backend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// rq builds a request.
func rq(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return stacktest.Request(domain, ds...)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor { return stacktest.Descriptor(kv...) }

// withAddend sets the descriptor's hits_addend.
func withAddend(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	return stacktest.WithAddend(d, n)
}

// heapAfterGC returns the live heap after two collections (the second
// frees what finalizers released in the first).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// settleGoroutines polls until at most baseline+slack goroutines run, and
// fails t if that does not happen within timeout. It returns the last
// count seen.
func settleGoroutines(t testing.TB, baseline, slack int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline+slack {
			return n
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("goroutines: %d, %d before (slack %d) after %v; stacks:\n%s", n, baseline, slack, timeout, buf)
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const mib = 1 << 20

// wireCodec sends a request encoded field by field (encodeRequest), as
// Envoy's C++ protobuf does: string fields are written as the bytes they
// hold, valid UTF-8 or not. (Go's proto.Marshal refuses invalid UTF-8, so
// a Go client could never send what Envoy sends.) Responses are decoded
// with the standard, strict proto.Unmarshal.
type wireCodec struct{}

func (wireCodec) Marshal(v any) ([]byte, error) {
	r, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return nil, fmt.Errorf("wireCodec: cannot marshal %T", v)
	}
	return encodeRequest(r), nil
}

func (wireCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("wireCodec: cannot unmarshal into %T", v)
	}
	return proto.Unmarshal(data, m)
}

// Name is the content subtype: the server decodes with its "proto" codec.
func (wireCodec) Name() string { return "proto" }

// encodeRequest writes r in the protobuf wire format without checking
// that strings are UTF-8 (field numbers from rls.proto and ratelimit.proto).
func encodeRequest(r *rlsv3.RateLimitRequest) []byte {
	var b []byte
	if r.Domain != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r.Domain)
	}
	for _, d := range r.Descriptors {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, encodeDescriptor(d))
	}
	if r.HitsAddend != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.HitsAddend))
	}
	return b
}

func encodeDescriptor(d *rlv3.RateLimitDescriptor) []byte {
	var b []byte
	for _, e := range d.GetEntries() {
		var eb []byte
		if e.GetKey() != "" {
			eb = protowire.AppendTag(eb, 1, protowire.BytesType)
			eb = protowire.AppendString(eb, e.Key)
		}
		if e.GetValue() != "" {
			eb = protowire.AppendTag(eb, 2, protowire.BytesType)
			eb = protowire.AppendString(eb, e.Value)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, eb)
	}
	if o := d.GetLimit(); o != nil {
		var ob []byte
		if o.RequestsPerUnit != 0 {
			ob = protowire.AppendTag(ob, 1, protowire.VarintType)
			ob = protowire.AppendVarint(ob, uint64(o.RequestsPerUnit))
		}
		if o.Unit != 0 {
			ob = protowire.AppendTag(ob, 2, protowire.VarintType)
			ob = protowire.AppendVarint(ob, uint64(int64(o.Unit))) // enums are int32, sign-extended
		}
		if o.UnitMultiplier != nil {
			ob = protowire.AppendTag(ob, 3, protowire.BytesType)
			ob = protowire.AppendBytes(ob, wrapped(uint64(o.UnitMultiplier.Value)))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, ob)
	}
	if a := d.GetHitsAddend(); a != nil {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, wrapped(a.Value))
	}
	if d.GetIsNegativeHits() {
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// wrapped encodes a UInt32Value or UInt64Value.
func wrapped(v uint64) []byte {
	if v == 0 {
		return nil
	}
	return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), v)
}

// rawCall sends req as Envoy would, whatever bytes its strings hold.
func rawCall(ctx context.Context, st *stack, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := new(rlsv3.RateLimitResponse)
	err := st.Conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, resp, grpc.ForceCodec(wireCodec{}))
	if err != nil {
		return nil, err
	}
	return resp, nil
}
