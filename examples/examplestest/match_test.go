package examplestest

import (
	"fmt"
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

// matchProblems matches every produced descriptor against d and lists what
// is wrong: a descriptor that matches nothing or a node that decides
// nothing (neither rules nor unlimited), and a node with rules that no
// descriptor reaches (dead config). matched maps each descriptor to the
// path of its node.
func matchProblems(d *descriptor.Domain, produced []producedDescriptor) (matched map[string]string, problems []string) {
	if d == nil {
		return nil, []string{"domain not in the sluice config"}
	}
	if len(produced) == 0 {
		return nil, []string{"no descriptors to check"}
	}
	matched = map[string]string{}
	reached := map[*descriptor.Node]bool{}
	for _, p := range produced {
		n := d.Match(p.entries)
		switch {
		case n == nil:
			problems = append(problems, fmt.Sprintf("%s matches nothing in domain %s: it would never be limited", p, d.Name))
			continue
		case len(n.Rules) == 0 && !n.Unlimited:
			problems = append(problems, fmt.Sprintf("%s matches %s, which has no rules", p, n.Path()))
			continue
		}
		reached[n] = true
		matched[p.String()] = n.Path()
	}
	d.Walk(func(n *descriptor.Node) {
		if (len(n.Rules) > 0 || n.Unlimited) && !reached[n] {
			problems = append(problems, fmt.Sprintf("%s:%d: %s is never reached by the descriptors the proxy sends", n.File, n.Line, n.Path()))
		}
	})
	return matched, problems
}

// checkDescriptorsMatch fails the test on every problem matchProblems
// finds and returns the matched node paths.
func checkDescriptorsMatch(t *testing.T, d *descriptor.Domain, produced []producedDescriptor) map[string]string {
	t.Helper()
	matched, problems := matchProblems(d, produced)
	for _, p := range problems {
		t.Error(p)
	}
	return matched
}

func TestMatchProblems(t *testing.T) {
	const cfg = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: allowed
    value: x
  - key: dead
    rate_limit: {unit: second, requests_per_unit: 1}
`
	domains, err := descriptor.Parse("d.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	c, err := descriptor.NewConfig(domains...)
	if err != nil {
		t.Fatal(err)
	}
	produced := []producedDescriptor{
		{route: "r", entries: []descriptor.Entry{{Key: "a", Value: "1"}}},
		{route: "r", entries: []descriptor.Entry{{Key: "nope", Value: "1"}}},
		{route: "r", entries: []descriptor.Entry{{Key: "allowed", Value: "x"}}},
	}
	matched, problems := matchProblems(c.Domain("d"), produced)
	want := []string{
		"r [nope=1] matches nothing in domain d: it would never be limited",
		"r [allowed=x] matches allowed_x, which has no rules",
		"d.yaml:7: dead is never reached by the descriptors the proxy sends",
	}
	wantList(t, "problems", problems, want)
	if matched["r [a=1]"] != "a" || len(matched) != 1 {
		t.Errorf("matched %v, want only r [a=1] -> a", matched)
	}
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
	// Varying the query string must not buy more OCR calls: every
	// /api/ocr* path of a user shares one counter.
	ocr := api.Match(parseProduced(t, "ocr [user=alice, path=/api/ocr]"))
	if ocr == nil || !ocr.ShareThreshold {
		t.Errorf("user.path_/api/ocr* must set share_threshold")
	}
	if api.FailureMode != descriptor.FailureError {
		t.Errorf("domain api failure_mode %v, want error (Envoy's failure_mode_deny decides)", api.FailureMode)
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
// file once (the reference reads them twice, a known problem of the
// reference: github.com/envoyproxy/ratelimit/issues/367).
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
