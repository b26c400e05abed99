package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
)

// aiGatewayNode is the xDS node id Envoy AI Gateway's controller serves
// its rate-limit configuration to (internal/ratelimit/runner, NodeID).
const aiGatewayNode = "envoy-ai-gateway-ratelimit"

// aiGatewayQuota is what Envoy AI Gateway v1.1.0's translator
// (internal/ratelimit/translator, BuildRateLimitConfigs) makes of
// examples/envoy-ai-gateway/quota-policy.yaml for the AIServiceBackend
// default/openai: one domain, ai-gateway-quota; under the backend_name and
// the model_name_override, for gpt-4o-mini a bucket rule on the distinct
// header x-user-id (key rule-0-x-user-id-match-0, no value) and the
// default bucket (rule-1-match--1), for gpt-4o its default bucket alone;
// every bucket quota_mode, a limit per hour.
func aiGatewayQuota() *rlsconfv3.RateLimitConfig {
	perHour := func(n uint32) *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: n}
	}
	return &rlsconfv3.RateLimitConfig{Name: "ai-gateway-quota", Domain: "ai-gateway-quota", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "backend_name", Value: "default/openai",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "model_name_override", Value: "gpt-4o-mini", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "rule-0-x-user-id-match-0", RateLimit: perHour(10000), QuotaMode: true},
				{Key: "rule-1-match--1", Value: "rule-1-match--1", RateLimit: perHour(100000), QuotaMode: true},
			}},
			{Key: "model_name_override", Value: "gpt-4o", RateLimit: perHour(20000), QuotaMode: true},
		},
	}}}
}

// aiGatewayCall is what Envoy sends for a request to gpt-4o-mini by user
// (the route's rate limits AI Gateway's extension server writes,
// internal/extensionserver/quota_ratelimit.go: one descriptor per bucket,
// the backend and model as generic keys, the header's value under the
// rule's key), or, with tokens > 0, on the response (apply_on_stream_done)
// with each descriptor's hits_addend the tokens used. user "" is a request
// to gpt-4o, whose one bucket is the model's.
func aiGatewayCall(user string, tokens uint64) *rlsv3.RateLimitRequest {
	base := func(model string) []*rlv3.RateLimitDescriptor_Entry {
		return []*rlv3.RateLimitDescriptor_Entry{{Key: "backend_name", Value: "default/openai"}, {Key: "model_name_override", Value: model}}
	}
	var ds []*rlv3.RateLimitDescriptor
	if user == "" {
		ds = []*rlv3.RateLimitDescriptor{{Entries: base("gpt-4o")}}
	} else {
		ds = []*rlv3.RateLimitDescriptor{
			{Entries: append(base("gpt-4o-mini"), &rlv3.RateLimitDescriptor_Entry{Key: "rule-0-x-user-id-match-0", Value: user})},
			{Entries: append(base("gpt-4o-mini"), &rlv3.RateLimitDescriptor_Entry{Key: "rule-1-match--1", Value: "rule-1-match--1"})},
		}
	}
	if tokens > 0 {
		for _, d := range ds {
			d.HitsAddend = wrapperspb.UInt64(tokens)
		}
	}
	return &rlsv3.RateLimitRequest{Domain: "ai-gateway-quota", Descriptors: ds}
}

// TestEnvoyAIGatewayQuota starts the sluice binary with the environment
// Envoy AI Gateway's rate-limit Deployment gives envoyproxy/ratelimit
// (examples/envoy-ai-gateway/ratelimit.yaml, from AI Gateway's own quota
// test), against a go-control-plane server serving AI Gateway's
// translation of the example QuotaPolicy to node envoy-ai-gateway-ratelimit,
// and Redis. It then sends what Envoy sends: a check per request and the
// tokens used on each response. A bucket binds from the response that
// exhausts it on; in Shared mode a request is admitted while any of its
// buckets has tokens left (quota_mode: denied only when all are over).
func TestEnvoyAIGatewayQuota(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	redis := redistest.Standalone(t)
	p := sluicetest.Start(t, sluicetest.Options{Env: map[string]string{
		// ratelimit.yaml's environment; the addresses are the test's.
		"LOG_LEVEL":                          "info",
		"REDIS_SOCKET_TYPE":                  "tcp",
		"REDIS_URL":                          redis.Addr(),
		"USE_STATSD":                         "false",
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID":            aiGatewayNode,
		"CONFIG_GRPC_XDS_SERVER_URL":         srv.Addr(), // the controller's :18002
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "100ms",
	}})
	srv.Set(t, aiGatewayNode, "1", aiGatewayQuota())
	srv.WaitACK(t, "1")
	client := p.Client()

	steps := []struct {
		what   string
		user   string
		tokens uint64
		want   rlsv3.RateLimitResponse_Code
	}{
		{"alice asks", "alice", 0, rlsv3.RateLimitResponse_OK},
		{"alice used 9000 tokens", "alice", 9000, rlsv3.RateLimitResponse_OK},
		{"alice asks, 999 of her 10000 left", "alice", 0, rlsv3.RateLimitResponse_OK},
		{"alice used 5000 tokens: her bucket is over, charged all the same", "alice", 5000, rlsv3.RateLimitResponse_OK},
		{"alice asks: her bucket is over, the shared one is not (Shared mode)", "alice", 0, rlsv3.RateLimitResponse_OK},
		{"bob asks", "bob", 0, rlsv3.RateLimitResponse_OK},
		{"bob used 90000 tokens: his bucket and the shared one are over", "bob", 90000, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"alice asks: both her buckets are over", "alice", 0, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"bob asks: both his buckets are over", "bob", 0, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"carol asks: her own bucket has tokens", "carol", 0, rlsv3.RateLimitResponse_OK},
		{"gpt-4o: asked", "", 0, rlsv3.RateLimitResponse_OK},
		{"gpt-4o: 20000 tokens used", "", 20000, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"gpt-4o: its bucket is over", "", 0, rlsv3.RateLimitResponse_OVER_LIMIT},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, s := range steps {
		resp, err := client.ShouldRateLimit(ctx, aiGatewayCall(s.user, s.tokens))
		if err != nil {
			t.Fatalf("step %d (%s): %v", i+1, s.what, err)
		}
		if got := resp.GetOverallCode(); got != s.want {
			t.Errorf("step %d (%s): %v, want %v; statuses %v", i+1, s.what, got, s.want, resp.GetStatuses())
		}
	}
	if log := p.Logs(); strings.Contains(log, "USE_STATSD") {
		t.Errorf("USE_STATSD=false, which asks for nothing, is warned about:\n%s", log)
	}
}
