// Package charttest renders the Helm chart charts/sluice with the helm
// binary for every values file and decodes every manifest strictly into
// the Kubernetes API types, so a misspelt field or a wrong type fails here
// and not at `kubectl apply`. It is a module of its own so that the
// Kubernetes API types never become a dependency of sluice itself.
package charttest

import (
	"bytes"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

const chartDir = "../sluice"

// helm returns the helm binary: $HELM, helm on PATH, or $GOPATH/bin/helm
// (where `go install` puts it). Missing, the test is skipped on a
// workstation and fails in CI (CI=true).
func helm(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	var paths []string
	if p, err := exec.LookPath("helm"); err == nil {
		paths = append(paths, p)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		paths = append(paths, filepath.Join(strings.TrimSpace(string(out)), "bin", "helm"))
	}
	return testenv.FindTool(t, "helm", "go install helm.sh/helm/v3/cmd/helm@v3.22.0", paths...)
}

// render runs helm template and returns its output, or the error output.
func render(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"template", "rl", chartDir, "--namespace", "limits", "--kube-version", "1.30.0"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// objects is a rendered release decoded by kind.
type objects struct {
	deployments     []appsv1.Deployment
	services        []corev1.Service
	configMaps      []corev1.ConfigMap
	pdbs            []policyv1.PodDisruptionBudget
	hpas            []autoscalingv2.HorizontalPodAutoscaler
	serviceMonitors []serviceMonitor
	kinds           []string
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart writes; decoding is strict, so any other field fails.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// wantAPIVersion is the apiVersion of each kind the chart renders.
var wantAPIVersion = map[string]string{
	"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1", "PodDisruptionBudget": "policy/v1",
	"HorizontalPodAutoscaler": "autoscaling/v2", "ServiceMonitor": "monitoring.coreos.com/v1",
}

// decode splits a rendered release and decodes every document strictly.
func decode(t *testing.T, out string) objects {
	t.Helper()
	var o objects
	decoders := map[string]func(doc string) error{
		"Deployment": into(&o.deployments), "Service": into(&o.services), "ConfigMap": into(&o.configMaps),
		"PodDisruptionBudget": into(&o.pdbs), "HorizontalPodAutoscaler": into(&o.hpas),
		"ServiceMonitor": into(&o.serviceMonitors),
	}
	for _, doc := range strings.Split(out, "\n---") {
		doc = strings.TrimSpace(doc)
		if doc == "" || strings.Trim(doc, "-\n ") == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if want, ok := wantAPIVersion[tm.Kind]; !ok || tm.APIVersion != want {
			t.Fatalf("kind %q apiVersion %q: want one of %v", tm.Kind, tm.APIVersion, wantAPIVersion)
		}
		o.kinds = append(o.kinds, tm.Kind)
		dec, ok := decoders[tm.Kind]
		if !ok {
			t.Fatalf("kind %q has no decoder", tm.Kind)
		}
		if err := dec(doc); err != nil {
			t.Fatalf("%s does not decode strictly: %v\n%s", tm.Kind, err, doc)
		}
	}
	return o
}

// into returns a decoder that decodes a document strictly (an unknown
// field is an error) and appends it to list.
func into[T any](list *[]T) func(doc string) error {
	return func(doc string) error {
		var v T
		err := yaml.UnmarshalStrict([]byte(doc), &v)
		*list = append(*list, v)
		return err
	}
}

func env(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// TestChartRenders renders every values file (and the chart's defaults)
// and checks what each must hold.
func TestChartRenders(t *testing.T) {
	bin := helm(t)
	tests := []struct {
		values    string
		set       []string
		backend   string
		redisType string
		kinds     []string
		admin     string // SLUICE_ADMIN_ADDR
	}{
		{"values.yaml", nil, "redis", "single", []string{"ConfigMap", "Service", "Service", "Deployment", "PodDisruptionBudget"}, "127.0.0.1:6070"},
		{"values-embedded.yaml", nil, "memory", "", []string{"ConfigMap", "Service", "Service", "Deployment"}, "127.0.0.1:6070"},
		{"values-redis.yaml", nil, "redis", "single", []string{"ConfigMap", "Service", "Service", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler"}, "127.0.0.1:6070"},
		{"values-sentinel.yaml", nil, "redis", "sentinel", []string{"ConfigMap", "Service", "Service", "Deployment", "PodDisruptionBudget"}, "127.0.0.1:6070"},
		{"values-cluster.yaml", nil, "redis", "cluster", []string{"ConfigMap", "Service", "Service", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor"}, "127.0.0.1:6070"},
		{"values.yaml", []string{"config.existingConfigMap=my-limits"}, "redis", "single", []string{"Service", "Service", "Deployment", "PodDisruptionBudget"}, "127.0.0.1:6070"},
		{"values.yaml", []string{"admin.exposeOnService=true", "admin.tokenSecret=sluice-admin"}, "redis", "single", []string{"ConfigMap", "Service", "Service", "Deployment", "PodDisruptionBudget"}, "0.0.0.0:6070"},
		{"values.yaml", []string{"admin.enabled=false"}, "redis", "single", []string{"ConfigMap", "Service", "Service", "Deployment", "PodDisruptionBudget"}, "off"},
		{"values.yaml", []string{"resources.limits=null"}, "redis", "single", []string{"ConfigMap", "Service", "Service", "Deployment", "PodDisruptionBudget"}, "127.0.0.1:6070"},
		{"values.yaml", []string{"service.headless=false"}, "redis", "single", []string{"ConfigMap", "Service", "Deployment", "PodDisruptionBudget"}, "127.0.0.1:6070"},
	}
	for _, tc := range tests {
		t.Run(tc.values+strings.Join(tc.set, ","), func(t *testing.T) {
			args := []string{"-f", filepath.Join(chartDir, tc.values)}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := render(t, bin, args...)
			if err != nil {
				t.Fatal(err)
			}
			o := decode(t, out)
			if got, want := sorted(o.kinds), sorted(tc.kinds); !slices.Equal(got, want) {
				t.Fatalf("kinds %v, want %v", got, want)
			}
			d := o.deployments[0]
			c := d.Spec.Template.Spec.Containers[0]
			e := env(c)
			if e["BACKEND_TYPE"].Value != tc.backend || e["REDIS_TYPE"].Value != tc.redisType {
				t.Errorf("BACKEND_TYPE %q REDIS_TYPE %q, want %q %q", e["BACKEND_TYPE"].Value, e["REDIS_TYPE"].Value, tc.backend, tc.redisType)
			}
			if tc.backend == "redis" && e["REDIS_URL"].Value == "" {
				t.Error("no REDIS_URL")
			}
			if got := e["SLUICE_ADMIN_ADDR"].Value; got != tc.admin {
				t.Errorf("SLUICE_ADMIN_ADDR %q, want %q", got, tc.admin)
			}
			// Probes on the gRPC health service.
			for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
				if p == nil || p.GRPC == nil || p.GRPC.Service == nil || *p.GRPC.Service != "envoy.service.ratelimit.v3.RateLimitService" {
					t.Errorf("%s probe is not the gRPC health service: %+v", name, p)
				}
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("no resource requests: %+v", c.Resources)
			}
			// GOMEMLIMIT follows the container's memory limit, when it has one.
			gml, limited := e["GOMEMLIMIT"], !c.Resources.Limits.Memory().IsZero()
			fromLimit := gml.ValueFrom != nil && gml.ValueFrom.ResourceFieldRef != nil && gml.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
			if fromLimit != limited || (!limited && gml.Name != "") {
				t.Errorf("GOMEMLIMIT %+v with memory limit %v: want it from limits.memory exactly when there is one", gml, c.Resources.Limits.Memory())
			}
			// The admin port is on the Service only when asked, with a token.
			var ports []string
			for _, p := range o.services[0].Spec.Ports {
				ports = append(ports, p.Name)
			}
			wantAdmin := tc.admin == "0.0.0.0:6070"
			if slices.Contains(ports, "admin") != wantAdmin {
				t.Errorf("service ports %v; admin exposed: want %v", ports, wantAdmin)
			}
			if wantAdmin && e["SLUICE_ADMIN_TOKEN_FILE"].Value == "" {
				t.Error("admin exposed without SLUICE_ADMIN_TOKEN_FILE")
			}
			// The config volume names the ConfigMap the chart wrote, or
			// the existing one; every config file the chart writes parses.
			cmName := d.Spec.Template.Spec.Volumes[0].ConfigMap.Name
			if len(o.configMaps) > 0 {
				if cmName != o.configMaps[0].Name {
					t.Errorf("config volume names %q, the chart wrote %q", cmName, o.configMaps[0].Name)
				}
				for name, content := range o.configMaps[0].Data {
					if _, err := descriptor.Parse(name, []byte(content)); err != nil {
						t.Errorf("config file %s: %v", name, err)
					}
				}
			} else if cmName != "my-limits" {
				t.Errorf("config volume names %q, want the existing ConfigMap my-limits", cmName)
			}
			sel := d.Spec.Selector.MatchLabels
			// The ClusterIP Service, and the headless one the Istio
			// examples' STRICT_DNS clusters resolve (unless turned off):
			// both select the pods, the headless one has the gRPC port.
			headless := 0
			for _, svc := range o.services {
				if !sameLabels(svc.Spec.Selector, sel) {
					t.Errorf("Service %s selects %v, the Deployment %v", svc.Name, svc.Spec.Selector, sel)
				}
				if svc.Spec.ClusterIP != corev1.ClusterIPNone {
					continue
				}
				headless++
				if svc.Name != d.Name+"-headless" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "grpc" || svc.Spec.Ports[0].Port != 8081 {
					t.Errorf("headless Service %s ports %+v, want %s-headless with the gRPC port 8081", svc.Name, svc.Spec.Ports, d.Name)
				}
			}
			if want := map[bool]int{true: 0, false: 1}[slices.Contains(tc.set, "service.headless=false")]; headless != want {
				t.Errorf("%d headless Services, want %d", headless, want)
			}
			for _, p := range o.pdbs {
				if !sameLabels(p.Spec.Selector.MatchLabels, sel) {
					t.Errorf("PDB selects %v, the Deployment %v", p.Spec.Selector.MatchLabels, sel)
				}
			}
			for _, h := range o.hpas {
				if h.Spec.ScaleTargetRef.Name != d.Name || d.Spec.Replicas != nil {
					t.Errorf("HPA targets %q (deployment %q, replicas %v: must be unset)", h.Spec.ScaleTargetRef.Name, d.Name, d.Spec.Replicas)
				}
			}
			for _, sm := range o.serviceMonitors {
				if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
				}
			}
		})
	}
}

// TestChartRefuses: values that would make a broken or unsafe release fail
// the render with a reason.
func TestChartRefuses(t *testing.T) {
	bin := helm(t)
	tests := []struct {
		set  []string
		want string
	}{
		{[]string{"admin.exposeOnService=true"}, "needs admin.tokenSecret"},
		{[]string{"backend=memory", "autoscaling.enabled=true"}, "autoscaling with backend memory"},
		{[]string{"backend=etcd"}, "backend must be memory or redis"},
		{[]string{"redis.type=ring"}, "redis.type must be"},
		{[]string{"redis.url="}, "redis.url is required"},
	}
	for _, tc := range tests {
		var args []string
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		_, err := render(t, bin, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %v: %v, want an error containing %q", tc.set, err, tc.want)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestChartLints runs helm lint --strict with every values file.
func TestChartLints(t *testing.T) {
	bin := helm(t)
	files, err := filepath.Glob(filepath.Join(chartDir, "values*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("values files: %v %v", files, err)
	}
	for _, f := range files {
		out, err := exec.Command(bin, "lint", "--strict", "--kube-version", "1.30.0", chartDir, "-f", f).CombinedOutput()
		if err != nil {
			t.Errorf("helm lint -f %s: %v\n%s", filepath.Base(f), err, out)
		}
	}
}

// TestChartServesTheIstioExamples: installed as the chart README says
// (release sluice, namespace sluice), the chart's headless Service is the
// one the Istio examples' STRICT_DNS clusters resolve.
func TestChartServesTheIstioExamples(t *testing.T) {
	bin := helm(t)
	cmd := exec.Command(bin, "template", "sluice", chartDir, "--namespace", "sluice", "--kube-version", "1.30.0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var name string
	for _, svc := range decode(t, string(out)).services {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			name = svc.Name
		}
	}
	if name == "" {
		t.Fatal("no headless Service")
	}
	addr := name + ".sluice.svc.cluster.local"
	for _, f := range []string{"ingress-gateway-ratelimit.yaml", "sidecar-ratelimit.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "istio", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "address: "+addr) {
			t.Errorf("examples/istio/%s does not resolve %s, the chart's headless Service", f, addr)
		}
	}
}
