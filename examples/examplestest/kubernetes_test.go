package examplestest

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/server"
)

const kubernetesDir = "examples/kubernetes"

// sluiceEnv lists the environment variables sluice reads. The manifests and
// docker-compose.yml may set only these.
var sluiceEnv = []string{
	"REDIS_TYPE", "REDIS_URL", "REDIS_AUTH", "CACHE_KEY_PREFIX",
	"LOG_LEVEL", "LOG_FORMAT", "BACKEND_TYPE", "GRPC_PORT", "PORT", "SLUICE_CONFIG",
	"SLUICE_HEALTH_FOLLOWS_BACKEND", "SLUICE_DRAIN_DELAY", "RESPONSE_DYNAMIC_METADATA",
}

// The health service names sluice's gRPC health server answers for.
var sluiceHealthServices = []string{"", "envoy.service.ratelimit.v3.RateLimitService"}

// kubernetesExample is examples/kubernetes decoded.
type kubernetesExample struct {
	namespaces  []namespace
	deployments []deployment
	configMaps  []configMap
	services    []service
	pdbs        []podDisruptionBudget
}

// wantAPIVersion is the apiVersion each kind the examples use must carry.
var wantAPIVersion = map[string]string{
	"Namespace":           "v1",
	"ConfigMap":           "v1",
	"Service":             "v1",
	"Deployment":          "apps/v1",
	"PodDisruptionBudget": "policy/v1",
}

// decodeKubernetes decodes manifests strictly by kind.
func decodeKubernetes(t *testing.T, ms []manifest) kubernetesExample {
	t.Helper()
	var k kubernetesExample
	for _, m := range ms {
		var tm typeMeta
		var err error
		switch m.kind {
		case "Namespace":
			tm, err = decodeAppend(m, &k.namespaces)
		case "ConfigMap":
			tm, err = decodeAppend(m, &k.configMaps)
		case "Service":
			tm, err = decodeAppend(m, &k.services)
		case "Deployment":
			tm, err = decodeAppend(m, &k.deployments)
		case "PodDisruptionBudget":
			tm, err = decodeAppend(m, &k.pdbs)
		default:
			t.Errorf("%s: kind %q is not checked by this test", m, m.kind)
			continue
		}
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if tm.APIVersion != wantAPIVersion[m.kind] {
			t.Errorf("%s: apiVersion %q, want %q", m, tm.APIVersion, wantAPIVersion[m.kind])
		}
	}
	return k
}

// decodeAppend decodes m strictly into a new T, appends it to list and
// returns its type metadata.
func decodeAppend[T interface{ meta() typeMeta }](m manifest, list *[]T) (typeMeta, error) {
	var v T
	err := m.decode(&v)
	*list = append(*list, v)
	return v.meta(), err
}

func loadKubernetesExample(t *testing.T) kubernetesExample {
	t.Helper()
	k := decodeKubernetes(t, readManifests(t, kubernetesDir))
	if len(k.namespaces) != 1 || len(k.deployments) != 1 || len(k.configMaps) != 1 || len(k.services) != 2 || len(k.pdbs) != 1 {
		t.Fatalf("want 1 Namespace, 1 Deployment, 1 ConfigMap, 2 Services, 1 PodDisruptionBudget; got %d, %d, %d, %d, %d",
			len(k.namespaces), len(k.deployments), len(k.configMaps), len(k.services), len(k.pdbs))
	}
	return k
}

func TestKubernetesStrictDecodingCatchesTypos(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"misspelled probe", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n        - name: x\n          readinesProbe: {}\n"},
		{"field at the wrong level", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nports: []\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := splitDocuments("test.yaml", []byte(tt.doc))
			if err != nil || len(ms) != 1 {
				t.Fatalf("split: %v (%d documents)", err, len(ms))
			}
			var v any
			switch ms[0].kind {
			case "Deployment":
				v = &deployment{}
			case "Service":
				v = &service{}
			}
			err = ms[0].decode(v)
			if err == nil || !strings.Contains(err.Error(), "not found in type") {
				t.Errorf("want an unknown-field error, got %v", err)
			}
		})
	}
}

func TestKubernetesDeployment(t *testing.T) {
	k := loadKubernetesExample(t)
	d := k.deployments[0]
	pod := d.Spec.Template.Spec
	podLabels := d.Spec.Template.Metadata.Labels

	if d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", d.Spec.Replicas)
	}
	if !subset(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("selector %v does not select the pod labels %v", d.Spec.Selector.MatchLabels, podLabels)
	}
	if d.Metadata.Namespace != k.namespaces[0].Metadata.Name {
		t.Errorf("deployment in namespace %q, the example creates %q", d.Metadata.Namespace, k.namespaces[0].Metadata.Name)
	}
	if d.Spec.Strategy.RollingUpdate.MaxUnavailable.Int != 0 || d.Spec.Strategy.RollingUpdate.MaxUnavailable.String != "" {
		t.Errorf("rolling update may take pods down before new ones are ready")
	}

	// Pod security: non-root, no privilege escalation, read-only root.
	sc := pod.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod must run as a numeric non-root user: runAsNonRoot %v runAsUser %v", sc.RunAsNonRoot, sc.RunAsUser)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("enableServiceLinks must be false: the Service named sluice would inject SLUICE_* variables")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	csc := c.SecurityContext
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation must be false")
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem must be true")
	}
	if csc.Privileged != nil && *csc.Privileged {
		t.Errorf("container is privileged")
	}
	if !slices.Equal(csc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("capabilities drop %v, want [ALL]", csc.Capabilities.Drop)
	}

	// Resources.
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("no %s request", r)
		}
	}
	if c.Resources.Limits["memory"] == "" {
		t.Errorf("no memory limit")
	}

	// Ports and probes.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["grpc"] != 8081 {
		t.Errorf("container ports %v, want http 8080 and grpc 8081", ports)
	}
	resolve := func(p intOrString) int {
		if p.String != "" {
			return ports[p.String]
		}
		return p.Int
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Fatalf("readiness and liveness probes are required")
	}
	// Readiness follows sluice's health: gRPC health for the rate-limit
	// service (or GET /healthcheck, which answers the same).
	rp := c.ReadinessProbe
	switch {
	case rp.GRPC != nil && rp.HTTPGet == nil && rp.TCPSocket == nil:
		if rp.GRPC.Port != ports["grpc"] {
			t.Errorf("readiness probe on gRPC port %d, container's grpc port is %d", rp.GRPC.Port, ports["grpc"])
		}
		svc := ""
		if rp.GRPC.Service != nil {
			svc = *rp.GRPC.Service
		}
		if !slices.Contains(sluiceHealthServices, svc) {
			t.Errorf("readiness probe asks for health service %q; sluice answers %q", svc, sluiceHealthServices)
		}
	case rp.HTTPGet != nil && rp.GRPC == nil && rp.TCPSocket == nil:
		if rp.HTTPGet.Path != "/healthcheck" || resolve(rp.HTTPGet.Port) != ports["http"] {
			t.Errorf("readiness probe GET %s on port %v, want /healthcheck on the http port", rp.HTTPGet.Path, rp.HTTPGet.Port)
		}
	default:
		t.Errorf("readiness probe must be gRPC health or GET /healthcheck")
	}
	// Liveness must not follow the backend (both health endpoints do with
	// SLUICE_HEALTH_FOLLOWS_BACKEND): restarting pods cannot fix Redis.
	lp := c.LivenessProbe
	if lp.TCPSocket == nil || lp.HTTPGet != nil || lp.GRPC != nil {
		t.Errorf("liveness probe must be a tcpSocket check: sluice's health endpoints fail while Redis is down")
	} else if p := resolve(lp.TCPSocket.Port); p != ports["grpc"] && p != ports["http"] {
		t.Errorf("liveness probe on port %v, which the container does not listen on", lp.TCPSocket.Port)
	}
	for name, pr := range map[string]*probe{"readiness": rp, "liveness": lp} {
		if pr.PeriodSeconds == 0 || pr.TimeoutSeconds == 0 || pr.FailureThreshold == 0 {
			t.Errorf("%s probe: set periodSeconds, timeoutSeconds and failureThreshold explicitly", name)
		}
	}

	// Environment: only variables sluice reads, with sane values.
	env := map[string]string{}
	for _, e := range c.Env {
		if !slices.Contains(sluiceEnv, e.Name) {
			t.Errorf("env %s is not a variable sluice reads (%v)", e.Name, sluiceEnv)
		}
		if (e.Value == nil) == (e.ValueFrom == nil) {
			t.Errorf("env %s: want exactly one of value and valueFrom", e.Name)
		}
		if e.Value != nil {
			env[e.Name] = *e.Value
		}
	}
	if env["REDIS_TYPE"] != "cluster" {
		t.Errorf("REDIS_TYPE %q, want cluster", env["REDIS_TYPE"])
	}
	checkRedisSeeds(t, env["REDIS_URL"])
	// Shutdown: health fails for the drain delay while the endpoint
	// removal spreads, before the listeners close (a call refused then
	// passes unlimited); the grace period covers the delay and in-flight
	// calls, or the kubelet kills sluice in the middle.
	drain, err := time.ParseDuration(env["SLUICE_DRAIN_DELAY"])
	if err != nil || drain <= 0 {
		t.Errorf("SLUICE_DRAIN_DELAY %q: want a positive duration (%v)", env["SLUICE_DRAIN_DELAY"], err)
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; drain+server.DefaultShutdownTimeout >= grace {
		t.Errorf("terminationGracePeriodSeconds %v does not cover the drain delay %v and the shutdown timeout %v", grace, drain, server.DefaultShutdownTimeout)
	}
	for name, port := range map[string]string{"PORT": "http", "GRPC_PORT": "grpc"} {
		if v, ok := env[name]; ok && v != strconv.Itoa(ports[port]) {
			t.Errorf("%s=%s but the container's %s port is %d", name, v, port, ports[port])
		}
	}

	// Config: the ConfigMap of the example, read-only at SLUICE_CONFIG.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("volume %s is mounted writable", m.Name)
		}
		mounts[m.MountPath] = m.Name
	}
	const configDir = "/etc/sluice/config"
	if env["SLUICE_CONFIG"] != configDir {
		t.Errorf("SLUICE_CONFIG %q, want %s", env["SLUICE_CONFIG"], configDir)
	}
	vol, ok := mounts[configDir]
	if !ok {
		t.Fatalf("nothing mounted at %s", configDir)
	}
	var cmName string
	for _, v := range pod.Volumes {
		if v.Name == vol && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName != k.configMaps[0].Metadata.Name || k.configMaps[0].Metadata.Namespace != d.Metadata.Namespace {
		t.Errorf("config volume uses ConfigMap %q; the example defines %s/%s", cmName, k.configMaps[0].Metadata.Namespace, k.configMaps[0].Metadata.Name)
	}
}

// checkRedisSeeds checks a Redis Cluster seed list: host:port, comma
// separated.
func checkRedisSeeds(t *testing.T, url string) {
	t.Helper()
	seeds := strings.Split(url, ",")
	if url == "" || len(seeds) < 2 {
		t.Errorf("REDIS_URL %q: want at least two host:port seeds for a cluster", url)
	}
	for _, s := range seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			t.Errorf("REDIS_URL seed %q: %v", s, err)
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			t.Errorf("REDIS_URL seed %q: bad port", s)
		}
	}
}

func TestKubernetesServicesAndBudget(t *testing.T) {
	k := loadKubernetesExample(t)
	d := k.deployments[0]
	podLabels := d.Spec.Template.Metadata.Labels
	ports := map[string]int{}
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, s := range k.services {
		if !subset(s.Spec.Selector, podLabels) {
			t.Errorf("service %s selects %v, not the sluice pods %v", s.Metadata.Name, s.Spec.Selector, podLabels)
		}
		for _, p := range s.Spec.Ports {
			target := p.TargetPort.Int
			if p.TargetPort.String != "" {
				target = ports[p.TargetPort.String]
			}
			if target == 0 || target != p.Port {
				t.Errorf("service %s port %s: %d -> %v does not reach container port %d", s.Metadata.Name, p.Name, p.Port, p.TargetPort, target)
			}
		}
	}
	svc := serviceByName(k, "sluice")
	if svc == nil || !slices.Equal(servicePorts(svc), []string{"grpc:8081", "http:8080"}) {
		t.Errorf("service sluice must expose grpc 8081 and http 8080")
	}
	headless := serviceByName(k, "sluice-headless")
	if headless == nil || headless.Spec.ClusterIP != "None" || !slices.Contains(servicePorts(headless), "grpc:8081") {
		t.Errorf("service sluice-headless must be headless (clusterIP: None) and expose grpc 8081")
	}

	pdb := k.pdbs[0]
	if !subset(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget selects %v, not the sluice pods", pdb.Spec.Selector.MatchLabels)
	}
	if m := pdb.Spec.MinAvailable; m.String != "" || m.Int < 1 || m.Int >= d.Spec.Replicas {
		t.Errorf("minAvailable %v: want at least 1 and fewer than the %d replicas, so nodes can drain", m, d.Spec.Replicas)
	}
}

func serviceByName(k kubernetesExample, name string) *service {
	for i := range k.services {
		if k.services[i].Metadata.Name == name {
			return &k.services[i]
		}
	}
	return nil
}

// servicePorts lists "name:port", sorted.
func servicePorts(s *service) []string {
	var out []string
	for _, p := range s.Spec.Ports {
		out = append(out, p.Name+":"+strconv.Itoa(p.Port))
	}
	slices.Sort(out)
	return out
}

// TestKubernetesConfigMapIsEnvoyExample keeps the ConfigMap's api.yaml equal
// to examples/envoy/sluice/api.yaml, so there is one config to maintain.
func TestKubernetesConfigMapIsEnvoyExample(t *testing.T) {
	k := loadKubernetesExample(t)
	got := k.configMaps[0].Data["api.yaml"]
	want := string(repoFile(t, "examples/envoy/sluice/api.yaml"))
	if got != want {
		t.Errorf("ConfigMap data api.yaml differs from examples/envoy/sluice/api.yaml; regenerate it (see the comment in 10-configmap.yaml)")
	}
	if len(k.configMaps[0].Data) != 1 {
		t.Errorf("ConfigMap holds %d files, want only api.yaml", len(k.configMaps[0].Data))
	}
}
