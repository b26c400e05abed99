package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
)

const xdsNode = "envoy-ratelimit"

// eventually polls cond (another process's state) until it holds or 20 s
// pass.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 20s; last: %s", what, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get returns the status and body of an HTTP GET.
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricLine wants a sample line of /metrics matching re.
func metricLine(p *sluicetest.Process, re string) func() (bool, string) {
	r := regexp.MustCompile(`(?m)^` + re + `$`)
	return func() (bool, string) {
		_, body := get("http://" + p.HTTPAddr() + "/metrics")
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if strings.Contains(l, "sluice_xds_") || strings.Contains(l, "sluice_config_reloads") {
				lines = append(lines, l)
			}
		}
		return r.MatchString(body), strings.Join(lines, "\n")
	}
}

// healthIs wants /healthcheck to answer code.
func healthIs(p *sluicetest.Process, code int) func() (bool, string) {
	return func() (bool, string) {
		got, body := get("http://" + p.HTTPAddr() + "/healthcheck")
		return got == code, fmt.Sprintf("%d %s", got, body)
	}
}

// expectAdmits sends hits for key=value one at a time and wants exactly
// admit OK answers, then OVER_LIMIT.
func expectAdmits(t *testing.T, client rlsv3.RateLimitServiceClient, domain, key, value string, admit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := sluicetest.Request(domain, 1, sluicetest.D(key, value))
	for i := 0; i <= admit; i++ {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("%s %s=%s call %d: %v", domain, key, value, i+1, err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == admit {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := resp.GetOverallCode(); got != want {
			t.Fatalf("%s %s=%s call %d: %v, want %v (limit %d)", domain, key, value, i+1, got, want, admit)
		}
	}
}

// TestXDSLifecycle runs the sluice binary against a real go-control-plane
// management server and checks decisions over gRPC after each step: no
// config yet (Unavailable, unhealthy), a config, a change, an invalid one
// (NACKed; the old one still decides; the error in the log and the
// metrics), the management server killed (sluice keeps deciding) and
// restarted with a newer config (sluice reconnects and takes it).
func TestXDSLifecycle(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	p := sluicetest.Start(t, sluicetest.Options{Env: map[string]string{
		"CONFIG_TYPE":                                   "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":                    srv.Addr(),
		"CONFIG_GRPC_XDS_NODE_ID":                       xdsNode,
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "100ms",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":           "100ms",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL":               "400ms",
		"BACKEND_TYPE":                                  "memory",
	}})
	client := p.Client()
	ctx := context.Background()

	// No configuration yet: unhealthy, and every call Unavailable.
	eventually(t, "/healthcheck 500 before the first config", healthIs(p, http.StatusInternalServerError))
	_, err := client.ShouldRateLimit(ctx, sluicetest.Request("api", 1, sluicetest.D("user", "x")))
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "no rate limit configuration") {
		t.Fatalf("before the first config: %v, want Unavailable", err)
	}

	// A configuration: healthy, decided.
	srv.Set(t, xdsNode, "1", xdstest.PerMinute("api", "user", 2))
	srv.WaitACK(t, "1")
	eventually(t, "/healthcheck 200 after the first config", healthIs(p, http.StatusOK))
	expectAdmits(t, client, "api", "user", "alice", 2)

	// A change.
	srv.Set(t, xdsNode, "2", xdstest.PerMinute("api", "user", 5))
	srv.WaitACK(t, "2")
	expectAdmits(t, client, "api", "user", "bob", 5)

	// An invalid configuration: NACKed, the last good one decides.
	bad := xdstest.PerMinute("api", "user", 1)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set(t, xdsNode, "3", bad)
	nack := srv.WaitNACK(t, "3")
	if !strings.Contains(nack.GetErrorDetail().GetMessage(), "descriptors[0].rate_limit: rate limit has no unit") {
		t.Errorf("NACK %q does not name the mistake", nack.GetErrorDetail().GetMessage())
	}
	expectAdmits(t, client, "api", "user", "carol", 5)
	eventually(t, "the NACK in the metrics", metricLine(p, `sluice_xds_responses_total\{result="nack"\} [1-9][0-9]*`))
	eventually(t, "the failed load in the metrics", metricLine(p, `sluice_config_reloads_total\{result="failure"\} [1-9][0-9]*`))
	eventually(t, "version 2 in use", metricLine(p, `sluice_xds_config_version_info\{version="2"\} 1`))
	eventually(t, "the NACK's error in the log", func() (bool, string) {
		return strings.Contains(p.Logs(), "rate limit has no unit") && strings.Contains(p.Logs(), "NACK"), ""
	})

	// The management server goes away: sluice keeps deciding.
	eventually(t, "connected", metricLine(p, `sluice_xds_connected 1`))
	srv.Stop()
	eventually(t, "disconnected", metricLine(p, `sluice_xds_connected 0`))
	expectAdmits(t, client, "api", "user", "dave", 5)
	eventually(t, "still healthy without the management server", healthIs(p, http.StatusOK))

	// It comes back with a newer configuration (its versions start over).
	srv.Restart(t)
	srv.Set(t, xdsNode, "1", xdstest.PerMinute("api", "user", 1))
	srv.WaitACK(t, "1")
	eventually(t, "reconnected", metricLine(p, `sluice_xds_connected 1`))
	eventually(t, "the restarted server's version in use", metricLine(p, `sluice_xds_config_version_info\{version="1"\} 1`))
	expectAdmits(t, client, "api", "user", "erin", 1)
}

// TestEnvoyGatewayEnvironment starts sluice with the environment Envoy
// Gateway v1.9.0 gives its rate-limit container (xdstest.EnvoyGatewayEnv),
// changing only what a test must: the certificate paths (/certs and
// /redis-certs) point to a test PKI, the host names to 127.0.0.1 (the xDS
// server on a free loopback port instead of Envoy Gateway's 18001), the trace endpoint to a closed
// local port, the Prometheus listener (:19001) to a free loopback port;
// SSL_CERT_FILE makes the test CA a system root, as a
// publicly trusted Redis certificate would be (Envoy Gateway sets no Redis
// CA); the harness adds loopback listen addresses on free ports. sluice
// starts healthy before any configuration (FORCE_START_WITHOUT_INITIAL_CONFIG),
// connects to the management server over mutual TLS, takes the
// configuration Envoy Gateway generates for a per-user limit and decides
// over gRPC with TLS, counting in Redis over TLS with a client
// certificate.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	p, srv, client := startAsEnvoyGateway(t, nil)
	eventually(t, "/healthcheck 200 before any configuration (force start)", healthIs(p, http.StatusOK))

	ctx := context.Background()
	_, err := client.ShouldRateLimit(ctx, sluicetest.Request("default/eg/http", 1, sluicetest.D("httproute/default/backend/rule/0/match/0/*", "httproute/default/backend/rule/0/match/0/*")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("before the first config: %v, want Unavailable", err)
	}

	srv.WaitFor(t, "a stream from node envoy-ratelimit over mutual TLS", func(s *xdstest.Server) bool {
		for _, r := range s.Requests() {
			if r.GetNode().GetId() == "envoy-ratelimit" {
				return true
			}
		}
		return false
	})
	srv.Set(t, "envoy-ratelimit", "1", envoyGatewayPerUser())
	srv.WaitACK(t, "1")
	eventually(t, "the config in use", func() (bool, string) {
		_, err := client.ShouldRateLimit(ctx, egRequest("probe", 0))
		return err == nil, fmt.Sprint(err)
	})
	for _, user := range []string{"alice", "bob"} {
		for i := 0; i <= 3; i++ {
			resp, err := client.ShouldRateLimit(ctx, egRequest(user, 1))
			if err != nil {
				t.Fatalf("%s call %d: %v", user, i+1, err)
			}
			want := rlsv3.RateLimitResponse_OK
			if i == 3 {
				want = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if got := resp.GetOverallCode(); got != want {
				t.Fatalf("%s call %d: %v, want %v", user, i+1, got, want)
			}
		}
	}
	if !strings.Contains(p.Logs(), "xds: applied the configuration") {
		t.Error("no ACK in the log")
	}
	// USE_PROMETHEUS=true: the incumbent's series, which Envoy Gateway's
	// Grafana dashboard reads, count the two denials (one per user).
	route := "httproute/default/backend/rule/0/match/0/*"
	series := `ratelimit_service_rate_limit_over_limit\{domain="default/eg/http",key1="` + regexp.QuoteMeta(route+"_"+route) + `",key2="rule-0-match-0"\} 2`
	if ok, got := metricLine(p, series)(); !ok {
		t.Errorf("no %s on /metrics; sluice's: %s", series, got)
	}
}

// startAsEnvoyGateway starts the sluice binary as Envoy Gateway v1.9.0
// starts its rate-limit container (see TestEnvoyGatewayEnvironment for
// what is changed and why), plus extra, with its xDS server on
// a free loopback port (mutual TLS) and a Redis requiring TLS client
// certificates. It returns the process, the xDS server and a gRPC client
// over TLS.
func startAsEnvoyGateway(t *testing.T, extra map[string]string) (*sluicetest.Process, *xdstest.Server, rlsv3.RateLimitServiceClient) {
	t.Helper()
	certs := xdstest.NewCerts(t, "envoy-gateway", "localhost", "127.0.0.1")
	redis := redistest.StandaloneTLS(t, redistest.TLS{CertFile: certs.Cert, KeyFile: certs.Key, CAFile: certs.CACert, RequireClientCert: true})
	srv := xdstest.Start(t, xdstest.Options{TLS: certs.ServerTLS()})

	env := map[string]string{"SSL_CERT_FILE": certs.CACert}
	for _, kv := range xdstest.EnvoyGatewayEnv {
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Replace(v, "/certs/", certs.Dir+"/", 1)
		v = strings.Replace(v, "/redis-certs/", certs.Dir+"/", 1)
		switch k {
		case "CONFIG_GRPC_XDS_SERVER_URL":
			v = srv.Addr() // Envoy Gateway's envoy-gateway:18001, here loopback and free
		case "REDIS_URL":
			v = redis.Addr()
		case "OTEL_EXPORTER_OTLP_ENDPOINT":
			v = "http://127.0.0.1:1"
		case "PROMETHEUS_ADDR":
			v = "127.0.0.1:0" // Envoy Gateway's :19001 on every interface, here loopback and free
		}
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	p := sluicetest.Start(t, sluicetest.Options{Env: env})
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(certs.ClientTLS("envoy-gateway"))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p, srv, rlsv3.NewRateLimitServiceClient(conn)
}

// envoyGatewayPerUser is the RateLimitConfig Envoy Gateway v1.9.0
// generates for a BackendTrafficPolicy with one global rule: 3 requests
// per hour for each distinct x-user-id header (the rule of
// examples/envoy-gateway/per-user.yaml, with a smaller limit), on listener
// default/eg/http and route httproute/default/backend/rule/0/match/0/*; the
// shape is that of Envoy Gateway's translator test data
// (internal/xds/translator/testdata/out/ratelimit-config/distinct-match.yaml).
func envoyGatewayPerUser() *rlsconfv3.RateLimitConfig {
	route := "httproute/default/backend/rule/0/match/0/*"
	return &rlsconfv3.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: route, Value: route,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       "rule-0-match-0",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 3},
		}},
	}}}
}

// egRequest is what Envoy sends for that rule: the route's generic key,
// then the header's value under the rule's key.
func egRequest(user string, hits uint32) *rlsv3.RateLimitRequest {
	route := "httproute/default/backend/rule/0/match/0/*"
	return &rlsv3.RateLimitRequest{Domain: "default/eg/http", HitsAddend: hits, Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: route, Value: route}, {Key: "rule-0-match-0", Value: user}},
	}}}
}

// TestEnvoyGatewayTokenBudget sends what Envoy sends for the rule of
// examples/envoy-gateway/token-cost.yaml (a check with descriptor
// hits_addend 0 on the request, the token count on the response), with
// Envoy Gateway's environment and nothing added: a charge that does not
// fit is counted and the budget stays spent, as under the incumbent.
// SLUICE_CHARGE_OVER_LIMIT=true does the same; an explicit false wins, and
// then the charge is denied and consumes nothing. A cost that comes from
// the request's hits_addend (the filter state envoy.ratelimit.hits_addend,
// no cost in the policy) stays all-or-nothing by default. A rule that
// takes its limit from metadata sends a limit override (here 100 per hour
// over a configured 1000) on the check and on the charge alike: the charge
// is counted against the override.
func TestEnvoyGatewayTokenBudget(t *testing.T) {
	type step struct {
		cost uint64
		want rlsv3.RateLimitResponse_Code
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	charged := []step{{0, ok}, {60, ok}, {0, ok}, {60, over}, {0, over}, {1, over}}
	cases := []struct {
		name     string
		charge   string
		request  bool // the cost is the request's hits_addend, the descriptor has none
		override bool // the descriptor carries a limit override of 100 per hour; the config says 1000
		steps    []step
	}{
		{"no setting: the response cost is charged", "", false, false, charged},
		{"SLUICE_CHARGE_OVER_LIMIT=true", "true", false, false, charged},
		{"SLUICE_CHARGE_OVER_LIMIT=false: a denied charge consumes nothing", "false", false, false,
			[]step{{0, ok}, {60, ok}, {0, ok}, {60, over}, {0, ok}, {40, ok}, {0, ok}, {1, over}}},
		{"no setting: a request-level cost is all-or-nothing", "", true, false, []step{{60, ok}, {60, over}, {40, ok}, {1, over}}},
		{"no setting: a limit from metadata, the response cost is charged", "", false, true, charged},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]string{}
			if tc.charge != "" {
				extra["SLUICE_CHARGE_OVER_LIMIT"] = tc.charge
			}
			_, srv, client := startAsEnvoyGateway(t, extra)
			conf := envoyGatewayPerUser()
			conf.Descriptors[0].Descriptors[0].RateLimit.RequestsPerUnit = 100
			if tc.override {
				conf.Descriptors[0].Descriptors[0].RateLimit.RequestsPerUnit = 1000
			}
			srv.Set(t, "envoy-ratelimit", "1", conf)
			srv.WaitACK(t, "1")
			ctx := context.Background()
			eventually(t, "the config in use", func() (bool, string) {
				_, err := client.ShouldRateLimit(ctx, egRequest("probe", 0))
				return err == nil, fmt.Sprint(err)
			})
			for i, st := range tc.steps {
				req := egRequest("carol", 0)
				if tc.override {
					req.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_HOUR}
				}
				if tc.request {
					req.HitsAddend = uint32(st.cost)
				} else {
					req.Descriptors[0].HitsAddend = &wrapperspb.UInt64Value{Value: st.cost}
				}
				resp, err := client.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatalf("step %d (cost %d): %v", i+1, st.cost, err)
				}
				if got := resp.GetOverallCode(); got != st.want {
					t.Fatalf("step %d (cost %d): %v, want %v", i+1, st.cost, got, st.want)
				}
			}
		})
	}
}
