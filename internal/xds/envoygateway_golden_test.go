package xds_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
	"github.com/sluice-rl/sluice/internal/xds"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
)

// goldenCase is one case of testdata/envoygateway-golden.yaml (its header
// says where each part comes from in Envoy Gateway's translator tests).
type goldenCase struct {
	Case    string           `yaml:"case"`
	Configs []map[string]any `yaml:"configs"`
	Sends   []struct {
		Domain  string   `yaml:"domain"`
		Entries []string `yaml:"entries"`
		Limit   uint32   `yaml:"limit"`
		Unit    string   `yaml:"unit"`
		Shadow  bool     `yaml:"shadow"`
	} `yaml:"sends"`
}

// loadGolden reads the cases and decodes each config strictly against the
// RateLimitConfig proto: a field name the proto does not have fails the
// test, so the data is what go-control-plane's type can carry.
func loadGolden(t *testing.T) ([]goldenCase, [][]*rlc) {
	t.Helper()
	raw, err := os.ReadFile("testdata/envoygateway-golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	confs := make([][]*rlc, len(cases))
	for i, c := range cases {
		for j, m := range c.Configs {
			js, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			conf := &rlc{}
			if err := protojson.Unmarshal(js, conf); err != nil {
				t.Fatalf("%s: configs[%d] is not a RateLimitConfig: %v", c.Case, j, err)
			}
			confs[i] = append(confs[i], conf)
		}
	}
	return cases, confs
}

// TestEnvoyGatewayGoldenConfigs serves, through a go-control-plane
// management server over TLS 1.3 with client certificates, each of Envoy
// Gateway's translator golden cases in turn (the RateLimitConfig
// resources it generates, internal/xds/translator/testdata/out/ratelimit-config/*.yaml),
// wants each ACKed, then sends every descriptor the golden route rate
// limits (*.routes.yaml) make Envoy send and wants the rule it walks to
// applied: limit admitted, the next denied unless in shadow mode,
// current_limit and limit_remaining the rule's. Then it does what Envoy
// Gateway does when the last policy is removed (a snapshot without
// resources: no limit applies any more), and what a newer Envoy Gateway
// would do with a field this build does not know (NACKed, the
// configuration in use stays).
func TestEnvoyGatewayGoldenConfigs(t *testing.T) {
	cases, confs := loadGolden(t)
	certs := xdstest.NewCerts(t, "envoy-gateway", "127.0.0.1")
	srv := xdstest.Start(t, xdstest.Options{TLS: certs.ServerTLS()})
	s := settingsFor(srv.Addr())
	s.UseTLS, s.ClientCert, s.ClientKey, s.ServerCACert = true, certs.Cert, certs.Key, certs.CACert
	rec := &recorder{}
	startClient(t, s, rec, newWaits(), io.Discard)

	newService := func() *service.Service {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		clock := testenv.NewClock(time.Date(2027, 1, 4, 10, 0, 0, 0, time.UTC))
		svc := service.New(service.Options{Backend: stacktest.Memory(t, memory.Options{Now: clock.Now}), Logger: stacktest.QuietLogger()})
		svc.SetConfig(rec.cfg)
		return svc
	}
	for i, c := range cases {
		t.Run(c.Case, func(t *testing.T) {
			version := strconv.Itoa(i + 1)
			srv.Set(t, node, version, confs[i]...)
			srv.WaitACK(t, version)
			if len(c.Sends) == 0 {
				t.Fatal("a case with nothing to send")
			}
			for _, send := range c.Sends {
				var entries []string
				for _, e := range send.Entries {
					k, v, _ := strings.Cut(e, "=")
					entries = append(entries, k, v)
				}
				unit := rlsconfv3.RateLimitUnit(rlsconfv3.RateLimitUnit_value[send.Unit])
				// A service of its own for each descriptor: rules of one
				// case may share a counter (one per method of a rule).
				decideUpTo(t, newService(), send.Domain, entries, send.Limit, unit, send.Shadow)
			}
		})
	}

	// The last BackendTrafficPolicy removed: Envoy Gateway's snapshot has
	// no RateLimitConfig, and no limit applies.
	last := cases[len(cases)-1].Sends[0]
	var entries []string
	for _, e := range last.Entries {
		k, v, _ := strings.Cut(e, "=")
		entries = append(entries, k, v)
	}
	req := &rlsv3.RateLimitRequest{Domain: last.Domain, Descriptors: []*rlv3.RateLimitDescriptor{stacktest.Descriptor(entries...)}}
	t.Run("every policy removed", func(t *testing.T) {
		srv.Set(t, node, "empty")
		srv.WaitACK(t, "empty")
		svc := newService()
		for i := range 3 {
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("call %d: %v %v, want OK with no limit", i+1, resp, err)
			}
		}
	})

	// A newer Envoy Gateway, built with a RateLimitConfig proto that has
	// a field this build does not (here number 9 of a descriptor): the
	// response is NACKed naming it, and the configuration in use stays.
	t.Run("a field this build does not know", func(t *testing.T) {
		srv.Set(t, node, "w1", confs[len(confs)-1]...)
		srv.WaitACK(t, "w1")
		newer := confs[len(confs)-1][0]
		xds.WithUnknown(newer.Descriptors[0].Descriptors[0], 9)
		srv.Set(t, node, "w2", newer)
		nack := srv.WaitNACK(t, "w2")
		want := "descriptors[0].descriptors[0]: fields 9 unknown to this build of sluice"
		if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, want) {
			t.Errorf("NACK %q does not contain %q", msg, want)
		}
		decideUpTo(t, newService(), last.Domain, entries, last.Limit, rlsconfv3.RateLimitUnit(rlsconfv3.RateLimitUnit_value[last.Unit]), last.Shadow)
	})
	rec.mu.Lock()
	got := fmt.Sprint(rec.rejected)
	rec.mu.Unlock()
	if strings.Trim(got, "[w2 ]") != "" {
		t.Errorf("NACKed versions %s, want only w2", got)
	}
}

// TestEnvoyGatewayGoldenCosts sends, step by step, what Envoy sends for
// the three routes with costs of Envoy Gateway's translator test
// internal/xds/translator/testdata/in/xds-ir/ratelimit.yaml (limits) and
// out/xds-ir/ratelimit.routes.yaml (their route rate limits): a request
// cost is the descriptor's hits_addend on the request's call (number
// 12345); a response cost is a second rate limit with the same actions,
// apply_on_stream_done and its hits_addend (a number from dynamic
// metadata, here 4 and 90000), sent after the response, whose answer
// Envoy ignores; a limit from metadata is the same override on both
// calls. Each cost is charged whole, as the incumbent counts it
// (docs/decisions/0073-descriptor-costs-charged-by-default.md), so a
// response cost binds the requests after it.
func TestEnvoyGatewayGoldenCosts(t *testing.T) {
	const domain = "first-listener"
	second := rlsconfv3.RateLimitUnit_SECOND
	conf := &rlc{Name: domain, Domain: domain, Descriptors: []*rld{
		routeLevel("req-cost", &rld{Key: "rule-0-match--1", Value: "rule-0-match--1", RateLimit: perUnit(5, second)}),
		routeLevel("res-cost", &rld{Key: "rule-0-match-0", Value: "rule-0-match-0", RateLimit: perUnit(5, second)}),
		routeLevel("req-and-resp-cost", &rld{Key: "rule-0-match-0", Value: "rule-0-match-0", RateLimit: perUnit(5, second)}),
	}}
	cfg, err := xds.Compile([]*rlc{conf}, xds.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		hits       int64 // the descriptor's hits_addend; -1: none (the request-level 0 counts 1)
		streamDone bool  // the call after the response (its answer is ignored by Envoy)
		want       rlsv3.RateLimitResponse_Code
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	override := &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100000, Unit: typev3.RateLimitUnit_HOUR}
	cases := []struct {
		route, rule string
		override    *rlv3.RateLimitDescriptor_RateLimitOverride
		steps       []step
	}{
		// 12345 on a limit of 5 per second: denied, and counted.
		{"req-cost", "rule-0-match--1", nil, []step{{12345, false, over}, {12345, false, over}}},
		// A request counts 1; the response charges 4 more: the next request is over.
		{"res-cost", "rule-0-match-0", nil, []step{{-1, false, ok}, {4, true, ok}, {-1, false, over}}},
		// The limit from metadata (100000 per hour) on both calls: the
		// request's 12345 fits, the response's 90000 passes the limit, and
		// the next request is over.
		{"req-and-resp-cost", "rule-0-match-0", override, []step{{12345, false, ok}, {90000, true, over}, {12345, false, over}}},
	}
	for _, tc := range cases {
		t.Run(tc.route, func(t *testing.T) {
			clock := testenv.NewClock(time.Date(2027, 1, 4, 10, 0, 0, 0, time.UTC))
			svc := service.New(service.Options{Backend: stacktest.Memory(t, memory.Options{Now: clock.Now}), Logger: stacktest.QuietLogger()})
			svc.SetConfig(cfg)
			for i, st := range tc.steps {
				d := stacktest.Descriptor(tc.route, tc.route, tc.rule, tc.rule)
				d.Limit = tc.override
				if st.hits >= 0 {
					d.HitsAddend = wrapperspb.UInt64(uint64(st.hits))
				}
				resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
				if got := resp.GetOverallCode(); got != st.want {
					t.Fatalf("step %d (hits %d, stream done %v): %v, want %v", i+1, st.hits, st.streamDone, got, st.want)
				}
			}
		})
	}
}
