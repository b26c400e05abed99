// Package validate checks the Envoy Gateway examples against Envoy Gateway's
// own Go API types and validation. It is a module of its own so that
// Envoy Gateway and the Kubernetes libraries it needs stay out of sluice's
// module; run it with `go test ./...` in this directory.
package validate

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"github.com/envoyproxy/gateway/api/v1alpha1/validation"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// decodeStrict decodes YAML into v, refusing unknown fields and trailing
// data, as the API server refuses fields a CRD's schema does not have.
func decodeStrict(t *testing.T, data []byte, v any) {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("YAML: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode into %T: %v", v, err)
	}
	if dec.More() {
		t.Fatalf("trailing data after %T", v)
	}
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEnvoyGatewayConfig: the ConfigMap holds an EnvoyGateway that decodes
// strictly, passes Envoy Gateway's own validation, and swaps only the
// rate-limit image.
func TestEnvoyGatewayConfig(t *testing.T) {
	var cm corev1.ConfigMap
	decodeStrict(t, read(t, "envoy-gateway-config.yaml"), &cm)
	if cm.Name != "envoy-gateway-config" || cm.Namespace != "envoy-gateway-system" {
		t.Errorf("ConfigMap %s/%s, want envoy-gateway-system/envoy-gateway-config", cm.Namespace, cm.Name)
	}
	doc, ok := cm.Data["envoy-gateway.yaml"]
	if !ok {
		t.Fatal("no envoy-gateway.yaml key")
	}
	var eg egv1a1.EnvoyGateway
	decodeStrict(t, []byte(doc), &eg)
	if eg.Kind != egv1a1.KindEnvoyGateway || eg.APIVersion != egv1a1.GroupVersion.String() {
		t.Errorf("kind %q apiVersion %q", eg.Kind, eg.APIVersion)
	}
	if err := validation.ValidateEnvoyGateway(&eg); err != nil {
		t.Fatalf("Envoy Gateway's validation: %v", err)
	}
	img := eg.Provider.Kubernetes.RateLimitDeployment.Container.Image
	if img == nil || !strings.Contains(*img, "sluice") {
		t.Errorf("rate-limit image %v, want sluice's", img)
	}
	// Swapping the image is the whole migration: response costs are
	// charged with no setting.
	if env := eg.Provider.Kubernetes.RateLimitDeployment.Container.Env; len(env) != 0 {
		t.Errorf("rate-limit container env %+v, want none", env)
	}
	if eg.RateLimit == nil || eg.RateLimit.Backend.Type != egv1a1.RedisBackendType || eg.RateLimit.Backend.Redis == nil {
		t.Errorf("rate limit backend %+v, want Redis", eg.RateLimit)
	}
}

// TestBackendTrafficPolicies: both policies decode strictly and say what
// the README says: a global per-user request limit, and a per-user token
// budget checked on the request (cost 0) and charged on the response from
// dynamic metadata.
func TestBackendTrafficPolicies(t *testing.T) {
	for _, tc := range []struct {
		file     string
		requests uint32
		unit     egv1a1.RateLimitUnit
		cost     bool
	}{
		{"per-user.yaml", 100, egv1a1.RateLimitUnitHour, false},
		{"token-cost.yaml", 10000, egv1a1.RateLimitUnitHour, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var p egv1a1.BackendTrafficPolicy
			decodeStrict(t, read(t, tc.file), &p)
			if p.Kind != egv1a1.KindBackendTrafficPolicy || p.APIVersion != egv1a1.GroupVersion.String() {
				t.Fatalf("kind %q apiVersion %q", p.Kind, p.APIVersion)
			}
			rl := p.Spec.RateLimit
			if rl == nil || rl.Type == nil || *rl.Type != egv1a1.GlobalRateLimitType || rl.Global == nil || len(rl.Global.Rules) != 1 {
				t.Fatalf("rateLimit %+v, want one global rule", rl)
			}
			r := rl.Global.Rules[0]
			if r.Limit.Requests != tc.requests || r.Limit.Unit != tc.unit {
				t.Errorf("limit %d per %s, want %d per %s", r.Limit.Requests, r.Limit.Unit, tc.requests, tc.unit)
			}
			if len(r.ClientSelectors) != 1 || len(r.ClientSelectors[0].Headers) != 1 {
				t.Fatalf("client selectors %+v, want one header", r.ClientSelectors)
			}
			h := r.ClientSelectors[0].Headers[0]
			if h.Name != "x-user-id" || h.Type == nil || *h.Type != egv1a1.HeaderMatchDistinct {
				t.Errorf("header selector %+v, want distinct x-user-id", h)
			}
			if !tc.cost {
				if r.Cost != nil {
					t.Errorf("cost %+v, want none", r.Cost)
				}
				return
			}
			c := r.Cost
			if c == nil || c.Request == nil || c.Response == nil {
				t.Fatalf("cost %+v, want request and response", c)
			}
			if c.Request.From != egv1a1.RateLimitCostFromNumber || c.Request.Number == nil || *c.Request.Number != 0 || c.Request.Metadata != nil {
				t.Errorf("request cost %+v, want the number 0 (check only)", c.Request)
			}
			if c.Response.From != egv1a1.RateLimitCostFromMetadata || c.Response.Metadata == nil || c.Response.Number != nil ||
				c.Response.Metadata.Namespace != "io.envoy.ai_gateway" || c.Response.Metadata.Key != "llm_total_token" {
				t.Errorf("response cost %+v, want io.envoy.ai_gateway/llm_total_token", c.Response)
			}
		})
	}
}
