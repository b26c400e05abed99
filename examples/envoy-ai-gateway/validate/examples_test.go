// Package validate checks the Envoy AI Gateway example against AI
// Gateway's own QuotaPolicy types (package aigv1alpha1, copied from AI
// Gateway v1.1.0) and the Kubernetes API types. It is a module of its own
// so that those types stay out of sluice's module; run it with
// `go test ./...` in this directory.
package validate

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	aigv1a1 "github.com/sluice-rl/sluice/examples/envoy-ai-gateway/validate/aigv1alpha1"
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

// documents splits the YAML file name of the example into its documents.
func documents(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile("../" + name)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range strings.Split(string(b), "\n---\n") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// TestUpstreamCopy: the files of package aigv1alpha1 are AI Gateway
// v1.1.0's, byte for byte (their git blob ids at that commit).
func TestUpstreamCopy(t *testing.T) {
	for file, blob := range map[string]string{
		"quota_policy.go": "ea4db7175c7d8154c129d71f95719c2cd50c11eb",
		"status.go":       "4874d1b9b8a36e79b17da1d55a2e4a0fd3908d04",
	} {
		b, err := os.ReadFile("aigv1alpha1/" + file)
		if err != nil {
			t.Fatal(err)
		}
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", len(b))
		h.Write(b)
		if got := hex.EncodeToString(h.Sum(nil)); got != blob {
			t.Errorf("%s: blob %s, want AI Gateway v1.1.0's %s", file, got, blob)
		}
	}
}

// TestQuotaPolicy: the QuotaPolicy decodes strictly into AI Gateway's type
// and stays within what its translator accepts (durations 1s, 1m, 1h or
// 1d; Shared mode; a model name on every per-model quota; header matches
// of a known type).
func TestQuotaPolicy(t *testing.T) {
	docs := documents(t, "quota-policy.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d documents, want 1", len(docs))
	}
	var p aigv1a1.QuotaPolicy
	decodeStrict(t, docs[0], &p)
	if p.Kind != "QuotaPolicy" || p.APIVersion != "aigateway.envoyproxy.io/v1alpha1" {
		t.Errorf("kind %q apiVersion %q", p.Kind, p.APIVersion)
	}
	if len(p.Spec.TargetRefs) != 1 || p.Spec.TargetRefs[0].Kind != "AIServiceBackend" || p.Spec.TargetRefs[0].Group != "aigateway.envoyproxy.io" {
		t.Errorf("targetRefs %+v, want one AIServiceBackend", p.Spec.TargetRefs)
	}
	duration := func(where string, q aigv1a1.QuotaValue) {
		if !slices.Contains([]string{"1s", "1m", "1h", "1d"}, q.Duration) || q.Limit == 0 {
			t.Errorf("%s: limit %d per %q: the translator takes a positive limit per 1s, 1m, 1h or 1d", where, q.Limit, q.Duration)
		}
	}
	if len(p.Spec.PerModelQuotas) == 0 {
		t.Fatal("no perModelQuotas")
	}
	for i, m := range p.Spec.PerModelQuotas {
		where := fmt.Sprintf("perModelQuotas[%d]", i)
		if m.ModelName == nil || *m.ModelName == "" {
			t.Errorf("%s: no modelName (the translator skips it)", where)
		}
		if m.Quota.Mode != "" && m.Quota.Mode != aigv1a1.QuotaBucketModeShared {
			t.Errorf("%s: mode %q, want Shared (the only one)", where, m.Quota.Mode)
		}
		duration(where+".defaultBucket", m.Quota.DefaultBucket)
		for j, r := range m.Quota.BucketRules {
			duration(fmt.Sprintf("%s.bucketRules[%d]", where, j), r.Quota)
			for _, sel := range r.ClientSelectors {
				for _, h := range sel.Headers {
					if h.Type == nil || !slices.Contains([]egv1a1.HeaderMatchType{egv1a1.HeaderMatchExact, egv1a1.HeaderMatchRegularExpression, egv1a1.HeaderMatchDistinct}, *h.Type) {
						t.Errorf("%s.bucketRules[%d]: header %s has type %v", where, j, h.Name, h.Type)
					}
				}
			}
		}
	}
}

// TestRateLimitDeployment: the Deployment and Service are AI Gateway's for
// its rate-limit service with sluice's image: the controller's default
// --quotaRateLimitServiceAddr (envoy-ai-gateway-ratelimit.envoy-gateway-system,
// port 8081) reaches it, and it reads the QuotaPolicy limits from the
// controller's xDS server (port 18002, node envoy-ai-gateway-ratelimit).
func TestRateLimitDeployment(t *testing.T) {
	docs := documents(t, "ratelimit.yaml")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want a Deployment and a Service", len(docs))
	}
	var d appsv1.Deployment
	decodeStrict(t, docs[0], &d)
	var svc corev1.Service
	decodeStrict(t, docs[1], &svc)
	if d.Kind != "Deployment" || svc.Kind != "Service" {
		t.Fatalf("kinds %q, %q", d.Kind, svc.Kind)
	}
	if svc.Name+"."+svc.Namespace != "envoy-ai-gateway-ratelimit.envoy-gateway-system" ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8081 {
		t.Errorf("Service %s.%s ports %+v, want envoy-ai-gateway-ratelimit.envoy-gateway-system:8081", svc.Name, svc.Namespace, svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers", len(cs))
	}
	c := cs[0]
	if !strings.HasPrefix(c.Image, "ghcr.io/sluice-rl/sluice:v") {
		t.Errorf("image %q, want sluice's, pinned", c.Image)
	}
	if !slices.Equal(c.Command, []string{"/bin/ratelimit"}) || !slices.Contains(c.Args, "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system") {
		t.Errorf("command %q args %q, want AI Gateway's", c.Command, c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{
		"CONFIG_TYPE":                "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID":    "envoy-ai-gateway-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_URL": "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local:18002",
		"GRPC_PORT":                  "8081",
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	if env["REDIS_URL"] == "" {
		t.Error("no REDIS_URL: the quotas would be per pod")
	}
}
