package examplestest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// composeFile is docker-compose.yml with the fields it uses, decoded
// strictly; top-level x- extension fields land in Extensions.
type composeFile struct {
	Services   map[string]composeService `yaml:"services"`
	Extensions map[string]any            `yaml:",inline"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       string            `yaml:"build"`
	Command     []string          `yaml:"command"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   dependsOn         `yaml:"depends_on"`
	Restart     string            `yaml:"restart"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
}

// dependsOn maps each dependency to its condition; the short list form
// means service_started.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			(*d)[s] = "service_started"
		}
		return nil
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for s, c := range m {
			(*d)[s] = c.Condition
		}
		return nil
	}
	return fmt.Errorf("line %d: depends_on must be a list or a mapping", n.Line)
}

// volume is a bind mount "source:target[:mode]".
type volume struct{ source, target, mode string }

func parseVolume(s string) (volume, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return volume{}, fmt.Errorf("volume %q: want source:target[:mode]", s)
	}
	v := volume{source: parts[0], target: parts[1]}
	if len(parts) == 3 {
		v.mode = parts[2]
	}
	return v, nil
}

// prometheusConfig is deploy/prometheus.yml, decoded strictly.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// decodeStrict decodes one YAML document, unknown fields being errors.
func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(v)
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := decodeStrict(repoFile(t, "docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("docker-compose.yml: unknown top-level key %q", k)
		}
	}
	return c
}

// mount returns the service's bind mount whose source is rel (relative to
// the repository root), checking that the source exists and is read-only.
func (s composeService) mount(t *testing.T, service, rel string) volume {
	t.Helper()
	for _, raw := range s.Volumes {
		v, err := parseVolume(raw)
		if err != nil {
			t.Errorf("%s: %v", service, err)
			continue
		}
		if v.source != "./"+rel {
			continue
		}
		if _, err := os.Stat(repoPath(t, rel)); err != nil {
			t.Errorf("%s mounts %s, which does not exist: %v", service, v.source, err)
		}
		if v.mode != "ro" {
			t.Errorf("%s mounts %s writable", service, v.source)
		}
		return v
	}
	t.Errorf("%s does not mount ./%s", service, rel)
	return volume{}
}

// readsMounted checks that the service mounts the repository file rel and
// that its command's flag names the file where it is mounted.
func (s composeService) readsMounted(t *testing.T, service, rel, flag string) {
	t.Helper()
	v := s.mount(t, service, rel)
	if got, _ := flagValue(s.Command, flag); got != v.target {
		t.Errorf("%s reads %s %q, but %s is mounted at %q", service, flag, got, path.Base(rel), v.target)
	}
}

// flagValue returns the value of a "--name value" or "name=value" style
// argument in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestComposeStack(t *testing.T) {
	c := loadCompose(t)
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	redis := []string{"redis-1", "redis-2", "redis-3", "redis-4", "redis-5", "redis-6"}
	want := append([]string{"demo", "envoy", "prometheus"}, redis...)
	want = append(want, "redis-cluster-init", "sluice")
	if !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}

	// Envoy runs examples/envoy/envoy.yaml and publishes its listener.
	envoy := c.Services["envoy"]
	envoy.readsMounted(t, "envoy", "examples/envoy/envoy.yaml", "-c")
	if !slices.Contains(envoy.Ports, "8888:8888") {
		t.Errorf("envoy ports %v: want 8888:8888", envoy.Ports)
	}

	// The clusters of envoy.yaml name compose services on the right ports.
	p := loadEnvoyParts(t)
	for _, name := range []string{"sluice", "demo"} {
		for _, ep := range clusterEndpoints(p.clusters[name]) {
			host, port, _ := net.SplitHostPort(ep)
			if _, ok := c.Services[host]; !ok {
				t.Errorf("envoy cluster %s points at %s, which is not a compose service", name, ep)
			}
			if host == "demo" {
				if l, _ := flagValue(c.Services["demo"].Command, "-listen"); l != ":"+port {
					t.Errorf("demo listens on %q, envoy calls port %s", l, port)
				}
			}
		}
	}

	// sluice: built from this repository, talking to the Redis Cluster,
	// reading examples/envoy/sluice.
	sl := c.Services["sluice"]
	if sl.Build != "." {
		t.Errorf("sluice build %q, want . (the root Dockerfile)", sl.Build)
	}
	for name := range sl.Environment {
		if !slices.Contains(sluiceEnv, name) {
			t.Errorf("sluice env %s is not a variable sluice reads", name)
		}
	}
	if sl.Environment["REDIS_TYPE"] != "cluster" {
		t.Errorf("sluice REDIS_TYPE %q, want cluster", sl.Environment["REDIS_TYPE"])
	}
	url := sl.Environment["REDIS_URL"]
	checkRedisSeeds(t, url)
	for _, seed := range strings.Split(url, ",") {
		host, port, _ := net.SplitHostPort(seed)
		r, ok := c.Services[host]
		if !ok || !slices.Contains(redis, host) {
			t.Errorf("REDIS_URL seed %s is not a redis node service", seed)
			continue
		}
		if p, _ := flagValue(r.Command, "--port"); p != port {
			t.Errorf("REDIS_URL seed %s, but %s listens on %q", seed, host, p)
		}
	}
	// The README's compose section asks sluice over gRPC on the host's
	// loopback (./scripts/sluice.sh check --addr 127.0.0.1:8081).
	if !slices.Contains(sl.Ports, "127.0.0.1:8081:8081") {
		t.Errorf("sluice ports %v: want 127.0.0.1:8081:8081 (the README's sluice.sh check)", sl.Ports)
	}
	sv := sl.mount(t, "sluice", "examples/envoy/sluice")
	if sl.Environment["SLUICE_CONFIG"] != sv.target {
		t.Errorf("SLUICE_CONFIG %q, but the config is mounted at %q", sl.Environment["SLUICE_CONFIG"], sv.target)
	}
	if sl.DependsOn["redis-cluster-init"] != "service_completed_successfully" {
		t.Errorf("sluice must wait for redis-cluster-init to complete: depends_on %v", sl.DependsOn)
	}

	// The Redis Cluster: six cluster-enabled nodes with health checks, and
	// the init service forming it from all of them once they are healthy.
	for _, n := range redis {
		r := c.Services[n]
		if v, _ := flagValue(r.Command, "--cluster-enabled"); v != "yes" {
			t.Errorf("%s: cluster-enabled is %q", n, v)
		}
		if r.Healthcheck == nil {
			t.Errorf("%s has no healthcheck for the init service to wait on", n)
		}
	}
	ini := c.Services["redis-cluster-init"]
	iv := ini.mount(t, "redis-cluster-init", "deploy/redis-cluster-init.sh")
	if !slices.Contains(ini.Entrypoint, iv.target) {
		t.Errorf("redis-cluster-init entrypoint %v does not run %s", ini.Entrypoint, iv.target)
	}
	var initNodes []string
	for _, n := range strings.Fields(ini.Environment["REDIS_NODES"]) {
		host, _, _ := net.SplitHostPort(n)
		initNodes = append(initNodes, host)
		if ini.DependsOn[host] != "service_healthy" {
			t.Errorf("redis-cluster-init does not wait for %s to be healthy", host)
		}
	}
	sort.Strings(initNodes)
	if !slices.Equal(initNodes, redis) {
		t.Errorf("REDIS_NODES covers %v, want %v", initNodes, redis)
	}

	// Prometheus scrapes sluice's HTTP port.
	pr := c.Services["prometheus"]
	pr.readsMounted(t, "prometheus", "deploy/prometheus.yml", "--config.file")
	var pc prometheusConfig
	if err := decodeStrict(repoFile(t, "deploy/prometheus.yml"), &pc); err != nil {
		t.Fatalf("deploy/prometheus.yml: %v", err)
	}
	scrapes := map[string]string{}
	for _, sc := range pc.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			for _, target := range s.Targets {
				scrapes[target] = sc.MetricsPath
			}
		}
	}
	if scrapes["sluice:8080"] != "/metrics" {
		t.Errorf("prometheus scrapes %v; want sluice:8080 at /metrics", scrapes)
	}
}

// TestComposeConfig runs Compose's own validation. Docker Compose v1 (the
// Debian docker-compose package, which CI installs) needs no Docker engine
// for `config`; nothing is built or started.
func TestComposeConfig(t *testing.T) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose is not installed (apt-get install docker-compose)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = repoPath(t, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose config -q: %v\n%s", err, out)
	}
}
