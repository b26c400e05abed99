package examplestest

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
)

const istioDir = "examples/istio"

// envoyFilter is Istio's networking.istio.io/v1alpha3 EnvoyFilter, with the
// fields the examples use. patch.value is Envoy config, checked against
// Envoy's protos.
type envoyFilter struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		WorkloadSelector struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"workloadSelector"`
		ConfigPatches []configPatch `yaml:"configPatches"`
	} `yaml:"spec"`
}

type configPatch struct {
	ApplyTo string `yaml:"applyTo"`
	Match   struct {
		Context            string                   `yaml:"context"`
		Listener           *listenerMatch           `yaml:"listener"`
		RouteConfiguration *routeConfigurationMatch `yaml:"routeConfiguration"`
	} `yaml:"match"`
	Patch struct {
		Operation string         `yaml:"operation"`
		Value     map[string]any `yaml:"value"`
	} `yaml:"patch"`
}

type listenerMatch struct {
	PortNumber  int `yaml:"portNumber"`
	FilterChain struct {
		Filter struct {
			Name      string `yaml:"name"`
			SubFilter struct {
				Name string `yaml:"name"`
			} `yaml:"subFilter"`
		} `yaml:"filter"`
	} `yaml:"filterChain"`
}

type routeConfigurationMatch struct {
	Vhost struct {
		Name  string `yaml:"name"`
		Route struct {
			Action string `yaml:"action"`
		} `yaml:"route"`
	} `yaml:"vhost"`
}

// istioPatchContexts are EnvoyFilter's PatchContext values.
var istioPatchContexts = []string{"ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY"}

// checkedFilter is one EnvoyFilter with its patches parsed as Envoy config.
type checkedFilter struct {
	name        string
	ratelimit   *ratelimitv3.RateLimit
	clusters    map[string]*clusterv3.Cluster
	descriptors []producedDescriptor
}

// checkEnvoyFilter validates every patch value of f against the Envoy
// proto its applyTo names and returns what the patches add.
func checkEnvoyFilter(f envoyFilter) (checkedFilter, error) {
	out := checkedFilter{name: f.Metadata.Name, clusters: map[string]*clusterv3.Cluster{}}
	if f.APIVersion != "networking.istio.io/v1alpha3" {
		return out, fmt.Errorf("apiVersion %q, want networking.istio.io/v1alpha3", f.APIVersion)
	}
	if len(f.Spec.WorkloadSelector.Labels) == 0 {
		return out, fmt.Errorf("no workloadSelector: the patches would apply to every proxy in the namespace")
	}
	for i, p := range f.Spec.ConfigPatches {
		where := fmt.Sprintf("configPatches[%d] (%s)", i, p.ApplyTo)
		if !slices.Contains(istioPatchContexts, p.Match.Context) {
			return out, fmt.Errorf("%s: match.context %q, want one of %v", where, p.Match.Context, istioPatchContexts)
		}
		js, err := valueToJSON(p.Patch.Value)
		if err != nil {
			return out, fmt.Errorf("%s: %w", where, err)
		}
		r := newTypeRecorder()
		switch p.ApplyTo {
		case "HTTP_FILTER":
			l := p.Match.Listener
			if p.Patch.Operation != "INSERT_BEFORE" || l == nil || l.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" || l.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
				return out, fmt.Errorf("%s: want INSERT_BEFORE envoy.filters.http.router in the HTTP connection manager", where)
			}
			hf := &hcmv3.HttpFilter{}
			if err := unmarshalStrict(js, hf, r); err != nil {
				return out, fmt.Errorf("%s: %w", where, err)
			}
			if _, err := validateDeep(hf, r); err != nil {
				return out, fmt.Errorf("%s: %w", where, err)
			}
			rl := &ratelimitv3.RateLimit{}
			if hf.GetName() != "envoy.filters.http.ratelimit" || hf.GetTypedConfig().UnmarshalTo(rl) != nil {
				return out, fmt.Errorf("%s: filter %s is not the rate-limit filter", where, hf.GetName())
			}
			out.ratelimit = rl
		case "CLUSTER":
			if p.Patch.Operation != "ADD" {
				return out, fmt.Errorf("%s: operation %s, want ADD", where, p.Patch.Operation)
			}
			c := &clusterv3.Cluster{}
			if err := unmarshalStrict(js, c, r); err != nil {
				return out, fmt.Errorf("%s: %w", where, err)
			}
			if _, err := validateDeep(c, r); err != nil {
				return out, fmt.Errorf("%s: %w", where, err)
			}
			out.clusters[c.GetName()] = c
		case "VIRTUAL_HOST", "HTTP_ROUTE":
			// A MERGE value is a fragment (a virtual host without name
			// or domains, a route without match), so ValidateAll on the
			// whole message would fail on fields Istio fills in. Parse
			// it strictly as its message, validate the rate limits.
			if p.Patch.Operation != "MERGE" || p.Match.RouteConfiguration == nil {
				return out, fmt.Errorf("%s: want a MERGE on a routeConfiguration match", where)
			}
			var limits []*routev3.RateLimit
			var msg proto.Message
			if p.ApplyTo == "VIRTUAL_HOST" {
				vh := &routev3.VirtualHost{}
				msg = vh
				if err := unmarshalStrict(js, vh, r); err != nil {
					return out, fmt.Errorf("%s: %w", where, err)
				}
				limits = vh.GetRateLimits()
			} else {
				rt := &routev3.Route{}
				msg = rt
				if err := unmarshalStrict(js, rt, r); err != nil {
					return out, fmt.Errorf("%s: %w", where, err)
				}
				limits = rt.GetRoute().GetRateLimits()
			}
			if len(limits) == 0 {
				return out, fmt.Errorf("%s: no rate_limits in %s", where, msg.ProtoReflect().Descriptor().Name())
			}
			for j, l := range limits {
				if _, err := validateDeep(l, r); err != nil {
					return out, fmt.Errorf("%s: rate_limits[%d]: %w", where, j, err)
				}
			}
			ds, err := descriptorsOf(out.name, limits, nil, defaultSamples)
			if err != nil {
				return out, fmt.Errorf("%s: %w", where, err)
			}
			out.descriptors = append(out.descriptors, ds...)
		default:
			return out, fmt.Errorf("%s: applyTo %s is not checked by this test", where, p.ApplyTo)
		}
	}
	if out.ratelimit == nil {
		return out, fmt.Errorf("no HTTP_FILTER patch adding the rate-limit filter")
	}
	if len(out.descriptors) == 0 {
		return out, fmt.Errorf("no patch adds rate_limits actions")
	}
	return out, nil
}

// loadIstioExample decodes examples/istio: the EnvoyFilters, checked, and
// the ConfigMap.
func loadIstioExample(t *testing.T) ([]checkedFilter, configMap) {
	t.Helper()
	var filters []checkedFilter
	var cms []configMap
	for _, m := range readManifests(t, istioDir) {
		switch m.kind {
		case "EnvoyFilter":
			var f envoyFilter
			if err := m.decode(&f); err != nil {
				t.Fatal(err)
			}
			cf, err := checkEnvoyFilter(f)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			filters = append(filters, cf)
		case "ConfigMap":
			var cm configMap
			if err := m.decode(&cm); err != nil {
				t.Fatal(err)
			}
			cms = append(cms, cm)
		default:
			t.Fatalf("%s: kind %q is not checked by this test", m, m.kind)
		}
	}
	if len(filters) != 2 || len(cms) != 1 {
		t.Fatalf("want 2 EnvoyFilters and 1 ConfigMap, got %d and %d", len(filters), len(cms))
	}
	return filters, cms[0]
}

func TestIstioEnvoyFilters(t *testing.T) {
	filters, cm := loadIstioExample(t)
	k := loadKubernetesExample(t)
	headless := serviceByName(k, "sluice-headless")
	if headless == nil {
		t.Fatalf("examples/kubernetes has no sluice-headless Service")
	}
	wantHost := headless.Metadata.Name + "." + headless.Metadata.Namespace + ".svc.cluster.local"

	domains := map[string]bool{}
	for _, f := range filters {
		rl := f.ratelimit
		domains[rl.GetDomain()] = true
		if rl.GetFailureModeDeny() || rl.GetTimeout() == nil || rl.GetRateLimitService().GetTransportApiVersion().String() != "V3" {
			t.Errorf("%s: want failure_mode_deny false, a timeout and transport_api_version V3", f.name)
		}
		// The filter calls a cluster that a patch of the same
		// EnvoyFilter adds, pointing at the Service of
		// examples/kubernetes over HTTP/2.
		name := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
		c, ok := f.clusters[name]
		if !ok {
			t.Errorf("%s: rate-limit filter calls cluster %q, which no CLUSTER patch adds", f.name, name)
			continue
		}
		eps := clusterEndpoints(c)
		if len(eps) != 1 {
			t.Errorf("%s: cluster %s has endpoints %v, want one", f.name, name, eps)
			continue
		}
		host, port, _ := net.SplitHostPort(eps[0])
		if host != wantHost || !slices.Contains(servicePorts(headless), "grpc:"+port) {
			t.Errorf("%s: cluster %s points at %s, want %s:<grpc port of %s>", f.name, name, eps[0], wantHost, headless.Metadata.Name)
		}
		opts := &upstreamhttpv3.HttpProtocolOptions{}
		raw := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		if raw == nil || raw.UnmarshalTo(opts) != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			t.Errorf("%s: cluster %s does not force HTTP/2, which gRPC needs", f.name, name)
		}
	}
	if !domains["ingress"] || !domains["mesh"] {
		t.Errorf("domains %v, want ingress and mesh", domains)
	}

	// The ConfigMap carries one file per domain, named after it, and
	// replaces the ConfigMap of examples/kubernetes (same name and
	// namespace, so the Deployment mounts it).
	for d := range domains {
		if _, ok := cm.Data[d+".yaml"]; !ok {
			t.Errorf("ConfigMap has no %s.yaml for domain %s", d, d)
		}
	}
	kcm := k.configMaps[0].Metadata
	if cm.Metadata.Name != kcm.Name || cm.Metadata.Namespace != kcm.Namespace {
		t.Errorf("ConfigMap %s/%s, want %s/%s (the one the Deployment mounts)", cm.Metadata.Namespace, cm.Metadata.Name, kcm.Namespace, kcm.Name)
	}
}

func TestIstioDescriptorEnumeration(t *testing.T) {
	filters, _ := loadIstioExample(t)
	var got []string
	for _, f := range filters {
		for _, d := range f.descriptors {
			got = append(got, f.ratelimit.GetDomain()+": "+d.String())
		}
	}
	want := []string{
		"ingress: sluice-ratelimit [remote_address=203.0.113.7]",
		"ingress: sluice-ratelimit [remote_address=2001:db8::7]",
		"ingress: sluice-ratelimit [host=bookinfo.example.com]",
		"ingress: sluice-ratelimit [host=other.example.com]",
		"ingress: sluice-ratelimit [host=bookinfo.example.com, user=alice]",
		"ingress: sluice-ratelimit [host=other.example.com, user=alice]",
		"mesh: demo-sluice-ratelimit [service=demo]",
		"mesh: demo-sluice-ratelimit [service=demo, method=write]",
		"mesh: demo-sluice-ratelimit [service=demo, user=alice]",
	}
	wantList(t, "descriptors", got, want)
}

// TestIstioPatchChecksHaveTeeth shows that mistakes in patch values are
// caught.
func TestIstioPatchChecksHaveTeeth(t *testing.T) {
	base := func() envoyFilter {
		var f envoyFilter
		f.APIVersion = "networking.istio.io/v1alpha3"
		f.Metadata.Name = "t"
		f.Spec.WorkloadSelector.Labels = map[string]string{"app": "x"}
		return f
	}
	filterPatch := func(typed map[string]any) configPatch {
		var p configPatch
		p.ApplyTo, p.Match.Context, p.Patch.Operation = "HTTP_FILTER", "GATEWAY", "INSERT_BEFORE"
		p.Match.Listener = &listenerMatch{}
		p.Match.Listener.FilterChain.Filter.Name = "envoy.filters.network.http_connection_manager"
		p.Match.Listener.FilterChain.Filter.SubFilter.Name = "envoy.filters.http.router"
		p.Patch.Value = map[string]any{"name": "envoy.filters.http.ratelimit", "typed_config": typed}
		return p
	}
	// rl returns a valid rate-limit filter config with fields changed.
	rl := func(change map[string]any) map[string]any {
		c := map[string]any{
			"@type":  "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
			"domain": "d",
			"rate_limit_service": map[string]any{
				"transport_api_version": "V3",
				"grpc_service":          map[string]any{"envoy_grpc": map[string]any{"cluster_name": "c"}},
			},
		}
		for k, v := range change {
			c[k] = v
		}
		return c
	}
	tests := []struct {
		name    string
		patch   configPatch
		wantErr string
	}{
		{"empty domain in the filter", filterPatch(rl(map[string]any{"domain": ""})), "RateLimit.Domain"},
		{"unknown field in the filter", filterPatch(rl(map[string]any{"failure_mode": "deny"})), `unknown field "failure_mode"`},
		{"cluster without a name", func() configPatch {
			var p configPatch
			p.ApplyTo, p.Match.Context, p.Patch.Operation = "CLUSTER", "GATEWAY", "ADD"
			p.Patch.Value = map[string]any{"type": "STRICT_DNS"}
			return p
		}(), "Cluster.Name"},
		{"unknown patch context", func() configPatch {
			p := filterPatch(rl(nil))
			p.Match.Context = "SIDECAR"
			return p
		}(), "match.context"},
		{"route fragment with an empty action", func() configPatch {
			var p configPatch
			p.ApplyTo, p.Match.Context, p.Patch.Operation = "HTTP_ROUTE", "SIDECAR_INBOUND", "MERGE"
			p.Match.RouteConfiguration = &routeConfigurationMatch{}
			p.Patch.Value = map[string]any{"route": map[string]any{"rate_limits": []any{map[string]any{"actions": []any{map[string]any{}}}}}}
			return p
		}(), "ActionSpecifier"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := base()
			f.Spec.ConfigPatches = []configPatch{tt.patch}
			_, err := checkEnvoyFilter(f)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}
