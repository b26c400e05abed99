//go:build descriptorload

// Built once pkg/descriptor has Load and Match (branch h-descriptor); remove
// this constraint after merging it.

package examplestest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// loadSluiceConfig loads sluice config files (paths relative to the module
// root) with pkg/descriptor, as `sluice serve` would.
func loadSluiceConfig(t *testing.T, rel ...string) *descriptor.Config {
	t.Helper()
	paths := make([]string, len(rel))
	for i, r := range rel {
		paths[i] = repoPath(t, r)
	}
	cfg, err := descriptor.Load(descriptor.LoadOptions{}, paths...)
	if err != nil {
		t.Fatalf("load %v: %v", rel, err)
	}
	return cfg
}

// checkDescriptorsMatch asserts that every produced descriptor matches a
// node of the domain that decides something (rules, or unlimited), and that
// every node of the domain with rules is reached by some descriptor (no
// dead config). It returns the matched node paths by descriptor.
func checkDescriptorsMatch(t *testing.T, d *descriptor.Domain, produced []producedDescriptor) map[string]string {
	t.Helper()
	if d == nil {
		t.Fatalf("domain not in the sluice config")
	}
	if len(produced) == 0 {
		t.Fatalf("no descriptors to check")
	}
	matched := map[string]string{}
	reached := map[*descriptor.Node]bool{}
	for _, p := range produced {
		n := d.Match(p.entries)
		switch {
		case n == nil:
			t.Errorf("%s matches nothing in domain %s: it would never be limited", p, d.Name)
			continue
		case len(n.Rules) == 0 && !n.Unlimited:
			t.Errorf("%s matches %s, which has no rules", p, n.Path())
			continue
		}
		reached[n] = true
		matched[p.String()] = n.Path()
	}
	d.Walk(func(n *descriptor.Node) {
		if (len(n.Rules) > 0 || n.Unlimited) && !reached[n] {
			t.Errorf("%s:%d: %s is never reached by the descriptors the proxy sends", n.File, n.Line, n.Path())
		}
	})
	return matched
}

func TestEnvoyDescriptorsMatchSluiceConfig(t *testing.T) {
	cfg := loadSluiceConfig(t, "examples/envoy/sluice")
	if got := cfg.Domains(); !slices.Equal(got, []string{"api"}) {
		t.Fatalf("domains %v, want [api]", got)
	}
	api := cfg.Domain("api")
	matched := checkDescriptorsMatch(t, api, envoyExampleDescriptors(t))

	// Where the interesting descriptors land: precedence (exact or
	// wildcard value before the key-only default) does what the comments
	// in api.yaml say.
	tests := []struct {
		descriptor string
		node       string
		rules      int
	}{
		{"ocr [remote_address=203.0.113.7]", "remote_address", 1},
		{"ocr [user=alice]", "user", 3},
		{"ocr [user=alice, path=/api/ocr/sample?q=1]", "user.path_/api/ocr*", 2},
		{"public [user=alice, path=/public/sample?q=1]", "user.path_/public/*", 0},
		{"default [user=alice, path=/sample?q=1]", "user.path", 1},
		{"ocr [route=ocr, method=write]", "route_ocr.method_write", 2},
		{"default [route=default]", "route_default", 1},
	}
	for _, tt := range tests {
		got, ok := matched[tt.descriptor]
		if !ok {
			t.Errorf("%s was not produced", tt.descriptor)
			continue
		}
		if got != tt.node {
			t.Errorf("%s matched %s, want %s", tt.descriptor, got, tt.node)
		}
		entries := parseProduced(t, tt.descriptor)
		if n := api.Match(entries); n != nil && len(n.Rules) != tt.rules {
			t.Errorf("%s: %d rules, want %d", tt.descriptor, len(n.Rules), tt.rules)
		}
	}
}

// parseProduced turns "route [k=v, k2=v2]" back into entries.
func parseProduced(t *testing.T, s string) []descriptor.Entry {
	t.Helper()
	i := strings.Index(s, " [")
	if i < 0 || !strings.HasSuffix(s, "]") {
		t.Fatalf("bad descriptor string %q", s)
	}
	var out []descriptor.Entry
	for _, kv := range strings.Split(s[i+2:len(s)-1], ", ") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("bad entry %q in %q", kv, s)
		}
		out = append(out, descriptor.Entry{Key: k, Value: v})
	}
	return out
}

// mountConfigMap writes a ConfigMap's data the way the kubelet mounts it:
// the files in a hidden timestamped directory, a "..data" link to it, and
// one link per key through "..data". Loading the mount point must read each
// file once (the reference read them twice: its issue #367).
func mountConfigMap(t *testing.T, cm configMap) string {
	t.Helper()
	dir := t.TempDir()
	stamp := "..2026_01_02_03_04_05.000000001"
	if err := os.Mkdir(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, stamp, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestKubernetesConfigMapLoads(t *testing.T) {
	k := loadKubernetesExample(t)
	cfg, err := descriptor.Load(descriptor.LoadOptions{}, mountConfigMap(t, k.configMaps[0]))
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", k.configMaps[0].Metadata.Name, err)
	}
	if got := cfg.Domains(); !slices.Equal(got, []string{"api"}) {
		t.Errorf("domains %v, want [api]", got)
	}
}

func TestIstioDescriptorsMatchConfigMap(t *testing.T) {
	filters, cm := loadIstioExample(t)
	cfg, err := descriptor.Load(descriptor.LoadOptions{}, mountConfigMap(t, cm))
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Metadata.Name, err)
	}
	if got := cfg.Domains(); !slices.Equal(got, []string{"ingress", "mesh"}) {
		t.Errorf("domains %v, want [ingress mesh]", got)
	}
	for _, f := range filters {
		t.Run(f.name, func(t *testing.T) {
			checkDescriptorsMatch(t, cfg.Domain(f.ratelimit.GetDomain()), f.descriptors)
		})
	}
}
