package examplestest

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	// Register the typed_config types the examples use, so Any fields
	// resolve. A type used in an example but not imported here fails.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

const envoyBootstrap = "examples/envoy/envoy.yaml"

// parseBootstrap reads an Envoy bootstrap from YAML, strictly.
func parseBootstrap(doc []byte) (*bootstrapv3.Bootstrap, *typeRecorder, error) {
	r := newTypeRecorder()
	b := &bootstrapv3.Bootstrap{}
	if err := yamlToProto(doc, b, r); err != nil {
		return nil, nil, err
	}
	return b, r, nil
}

// checkBootstrap parses and validates a bootstrap the way these tests do.
func checkBootstrap(doc []byte) (*bootstrapv3.Bootstrap, []string, error) {
	b, r, err := parseBootstrap(doc)
	if err != nil {
		return nil, nil, err
	}
	unpacked, err := validateDeep(b, r)
	return b, unpacked, err
}

func TestEnvoyBootstrapValidates(t *testing.T) {
	_, unpacked, err := checkBootstrap(repoFile(t, envoyBootstrap))
	if err != nil {
		t.Fatalf("%s: %v", envoyBootstrap, err)
	}
	// Every typed_config in the file was unpacked and validated as its
	// own type, not skipped.
	want := []string{
		"envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
		"envoy.extensions.filters.http.ratelimit.v3.RateLimit",
		"envoy.extensions.filters.http.router.v3.Router",
		"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
	}
	wantList(t, "unpacked typed_configs", unpacked, want)
}

// TestEnvoyBootstrapRejectsMistakes shows the checks above have teeth: each
// small, realistic mistake in envoy.yaml is caught.
func TestEnvoyBootstrapRejectsMistakes(t *testing.T) {
	tests := []struct {
		name      string
		old, new  string
		wantError string
	}{
		{"misspelled field inside a typed_config", "failure_mode_deny: false", "failure_mode_denyy: false", "unknown field"},
		{"unknown typed_config type", "ratelimit.v3.RateLimit", "ratelimit.v3.RateLimitz", "RateLimitz"},
		{"empty domain, caught only after unpacking", "domain: api", `domain: ""`, "Domain"},
		{"bad enum", "DRAFT_VERSION_03", "DRAFT_VERSION_04", "DRAFT_VERSION_04"},
		{"port out of range", "port_value: 8081", "port_value: 80810", "PortValue"},
		{"rate limit action with nothing set", "- remote_address: {}", "- {}", "ActionSpecifier"},
		{"request_headers without descriptor_key", "header_name: x-user-id, descriptor_key: user", "header_name: x-user-id", "DescriptorKey"},
	}
	good := string(repoFile(t, envoyBootstrap))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(good, tt.old) {
				t.Fatalf("%s no longer contains %q; update the test", envoyBootstrap, tt.old)
			}
			bad := strings.Replace(good, tt.old, tt.new, 1)
			_, _, err := checkBootstrap([]byte(bad))
			if err == nil {
				t.Fatalf("no error for %q -> %q", tt.old, tt.new)
			}
			if !strings.Contains(err.Error(), tt.wantError) {
				t.Errorf("error %q does not mention %q", err, tt.wantError)
			}
		})
	}
}

// envoyParts is what the wiring checks look at, unpacked.
type envoyParts struct {
	boot      *bootstrapv3.Bootstrap
	hcm       *hcmv3.HttpConnectionManager
	ratelimit *ratelimitv3.RateLimit
	clusters  map[string]*clusterv3.Cluster
}

func loadEnvoyParts(t *testing.T) envoyParts {
	t.Helper()
	b, _, err := checkBootstrap(repoFile(t, envoyBootstrap))
	if err != nil {
		t.Fatalf("%s: %v", envoyBootstrap, err)
	}
	p := envoyParts{boot: b, clusters: map[string]*clusterv3.Cluster{}}
	ls := b.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 || len(ls[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("want one listener with one filter chain holding one filter")
	}
	p.hcm = &hcmv3.HttpConnectionManager{}
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(p.hcm); err != nil {
		t.Fatalf("listener filter is not the HTTP connection manager: %v", err)
	}
	for _, f := range p.hcm.GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ratelimit" {
			p.ratelimit = &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(p.ratelimit); err != nil {
				t.Fatalf("ratelimit filter config: %v", err)
			}
		}
	}
	if p.ratelimit == nil {
		t.Fatalf("no envoy.filters.http.ratelimit filter")
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		p.clusters[c.GetName()] = c
	}
	return p
}

// TestEnvoyBootstrapWiring checks what Envoy checks only when it loads the
// config (names that refer to each other) and what the example promises.
func TestEnvoyBootstrapWiring(t *testing.T) {
	p := loadEnvoyParts(t)

	addr := p.boot.GetStaticResources().GetListeners()[0].GetAddress().GetSocketAddress()
	if addr.GetAddress() != "0.0.0.0" || addr.GetPortValue() != 8888 {
		t.Errorf("listener on %s:%d, want 0.0.0.0:8888", addr.GetAddress(), addr.GetPortValue())
	}
	if !p.hcm.GetUseRemoteAddress().GetValue() {
		t.Errorf("use_remote_address is off: remote_address descriptors would trust client X-Forwarded-For")
	}

	var names []string
	for _, f := range p.hcm.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	if want := []string{"envoy.filters.http.ratelimit", "envoy.filters.http.router"}; !slices.Equal(names, want) {
		t.Errorf("http filters %v, want %v (router last)", names, want)
	}

	rl := p.ratelimit
	checks := []struct {
		what      string
		got, want any
	}{
		{"domain", rl.GetDomain(), "api"},
		{"failure_mode_deny", rl.GetFailureModeDeny(), false},
		{"enable_x_ratelimit_headers", rl.GetEnableXRatelimitHeaders(), ratelimitv3.RateLimit_DRAFT_VERSION_03},
		{"transport_api_version", rl.GetRateLimitService().GetTransportApiVersion(), corev3.ApiVersion_V3},
		{"rate limit cluster", rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(), "sluice"},
		{"timeout set", rl.GetTimeout() != nil && rl.GetTimeout().AsDuration() > 0 && rl.GetTimeout().AsDuration() <= time.Second, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("ratelimit filter %s = %v, want %v", c.what, c.got, c.want)
		}
	}

	sluice, ok := p.clusters["sluice"]
	if !ok {
		t.Fatalf("no cluster named sluice for the rate limit service")
	}
	if got := clusterEndpoints(sluice); !slices.Equal(got, []string{"sluice:8081"}) {
		t.Errorf("sluice cluster endpoints %v, want [sluice:8081]", got)
	}
	if sluice.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("sluice cluster type %v, want STRICT_DNS", sluice.GetType())
	}
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	raw, ok := sluice.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok {
		t.Fatalf("sluice cluster has no HttpProtocolOptions: gRPC needs HTTP/2 upstream")
	}
	if err := raw.UnmarshalTo(opts); err != nil {
		t.Fatalf("sluice cluster protocol options: %v", err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("sluice cluster does not force HTTP/2: gRPC would fail")
	}
	if got := clusterEndpoints(p.clusters["demo"]); !slices.Equal(got, []string{"demo:8080"}) {
		t.Errorf("demo cluster endpoints %v, want [demo:8080]", got)
	}

	// Every route goes to a defined cluster and carries rate limits of
	// the filter's stage.
	for _, vh := range p.hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			c := r.GetRoute().GetCluster()
			if _, ok := p.clusters[c]; !ok {
				t.Errorf("route %s: cluster %q is not defined", r.GetName(), c)
			}
			if len(r.GetRoute().GetRateLimits()) == 0 {
				t.Errorf("route %s has no rate_limits", r.GetName())
			}
			for _, l := range r.GetRoute().GetRateLimits() {
				if l.GetStage().GetValue() != rl.GetStage() {
					t.Errorf("route %s: rate limit stage %d is not the filter's %d: never sent", r.GetName(), l.GetStage().GetValue(), rl.GetStage())
				}
			}
		}
	}
}

// clusterEndpoints lists a cluster's static endpoints as host:port.
func clusterEndpoints(c *clusterv3.Cluster) []string {
	var out []string
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, e := range le.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, a.GetAddress()+":"+strconv.FormatUint(uint64(a.GetPortValue()), 10))
		}
	}
	return out
}

// routesOf lists the routes of every virtual host of an HCM's static route
// config.
func routesOf(hcm *hcmv3.HttpConnectionManager) []*routev3.Route {
	var out []*routev3.Route
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		out = append(out, vh.GetRoutes()...)
	}
	return out
}
