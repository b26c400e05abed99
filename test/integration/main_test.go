package integration

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// cluster is the Redis Cluster shared by the tests that do not kill nodes;
// each test isolates its keys with its own CACHE_KEY_PREFIX.
var cluster = &redistest.SharedCluster{}

func TestMain(m *testing.M) { sluicetest.Main(m, cluster.Close) }

// topology is a Redis deployment a test runs sluice against.
type topology struct {
	name string
	// env points sluice at it (REDIS_TYPE, REDIS_URL) with a key prefix
	// of its own.
	env func(t *testing.T) map[string]string
}

// topologies are standalone Redis (one per test) and the shared cluster.
var topologies = []topology{
	{"standalone", func(t *testing.T) map[string]string {
		return standaloneEnv(redistest.Standalone(t))
	}},
	{"cluster", func(t *testing.T) map[string]string {
		return clusterEnv(t, cluster.Get(t))
	}},
}

func standaloneEnv(s *redistest.Server) map[string]string {
	return map[string]string{"REDIS_TYPE": "single", "REDIS_URL": s.Addr()}
}

func clusterEnv(t *testing.T, c *redistest.ClusterSet) map[string]string {
	return map[string]string{
		"REDIS_TYPE":       "cluster",
		"REDIS_URL":        strings.Join(c.Addrs(), ","),
		"CACHE_KEY_PREFIX": sluicetest.KeyPrefix(t),
	}
}

// merge returns the union of the maps; later maps win.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// configDir writes files (name → YAML) into a new directory.
func configDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		testenv.ReplaceFile(t, filepath.Join(dir, name), text)
	}
	return dir
}

// ctxFor returns a context bounded by d, cancelled when t ends.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// call sends one request and fails t on a gRPC error.
func call(t *testing.T, p *sluicetest.Process, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := p.Client().ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// withCost sets the descriptor-level hits_addend of every descriptor of
// req to n (0 is a peek) and marks them refunds if refund is set.
func withCost(req *rlsv3.RateLimitRequest, n uint64, refund bool) *rlsv3.RateLimitRequest {
	for _, d := range req.Descriptors {
		d.HitsAddend = wrapperspb.UInt64(n)
		d.IsNegativeHits = refund
	}
	return req
}

// peek asks for the state of one descriptor without consuming anything.
func peek(t *testing.T, p *sluicetest.Process, domain string, d []sluicetest.Entry) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	return call(t, p, withCost(sluicetest.Request(domain, 0, d), 0, false)).Statuses[0]
}

// verdict is what a test expects of one DescriptorStatus; name "" with
// limit 0 means no current_limit.
type verdict struct {
	code      rlsv3.RateLimitResponse_Code
	name      string
	limit     uint32
	remaining uint32
}

// statusOf reduces a DescriptorStatus to what verdict compares.
func statusOf(s *rlsv3.RateLimitResponse_DescriptorStatus) verdict {
	out := verdict{code: s.Code, remaining: s.LimitRemaining}
	if l := s.CurrentLimit; l != nil {
		out.name, out.limit = l.Name, l.RequestsPerUnit
	}
	return out
}

func (s verdict) String() string {
	return fmt.Sprintf("{%v %q limit %d remaining %d}", s.code, s.name, s.limit, s.remaining)
}

// entries builds a single-entry descriptor.
func entries(kv ...string) []sluicetest.Entry { return sluicetest.D(kv...) }

// descriptor is a corev3 descriptor, for tests building requests by hand.
func descriptor(kv ...string) *corev3.RateLimitDescriptor {
	return sluicetest.Request("", 0, sluicetest.D(kv...)).Descriptors[0]
}
