package descriptor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// blockYAML is a domain whose descriptors nest depth levels, in block
// style: the descriptor of level i (from 1) starts on line 3i.
func blockYAML(depth int) string {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors:\n")
	indent := ""
	for i := range depth {
		fmt.Fprintf(&b, "%s  - key: k%d\n%s    rate_limit: {unit: second, requests_per_unit: 1}\n", indent, i+1, indent)
		if i < depth-1 {
			fmt.Fprintf(&b, "%s    descriptors:\n", indent)
		}
		indent += "    "
	}
	return b.String()
}

// flowYAML is the same in flow style, one line: linear in the depth.
func flowYAML(depth int) string {
	s := "{key: k, rate_limit: {unit: second, requests_per_unit: 1}}"
	for range depth - 1 {
		s = "{key: k, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: [" + s + "]}"
	}
	return "domain: deep\ndescriptors:\n  - " + s + "\n"
}

// Descriptors nest at most MaxDepth levels: a file nesting them deeper is
// refused with its file, the line of the first descriptor too deep and
// the bound; one nesting them 9,900 levels (which held gigabytes when
// read over xDS) is refused as well, by the YAML reader's own bound, with
// its file and line, and reading it stays small.
func TestDepthBound(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string // "" for a valid config
	}{
		{"at the bound", blockYAML(descriptor.MaxDepth), ""},
		{"one beyond", blockYAML(descriptor.MaxDepth + 1),
			fmt.Sprintf("deep.yaml:%d: descriptor nested %d levels deep, beyond the %d a configuration may have", 3*(descriptor.MaxDepth+1), descriptor.MaxDepth+1, descriptor.MaxDepth)},
		{"1,000 deep, one line", flowYAML(1000),
			fmt.Sprintf("deep.yaml:3: descriptor nested %d levels deep, beyond the %d", descriptor.MaxDepth+1, descriptor.MaxDepth)},
		{"9,900 deep, one line", flowYAML(9900), "deep.yaml:3: bad YAML: exceeded max depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "deep.yaml"), []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cfg, err := descriptor.Load(descriptor.LoadOptions{}, dir)
			runtime.ReadMemStats(&after)
			if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64*uint64(len(tc.yaml))+(16<<20) {
				t.Errorf("reading %d bytes allocated %d MB", len(tc.yaml), allocated>>20)
			}
			if tc.want == "" {
				if err != nil || cfg.Domain("deep").Depth() != descriptor.MaxDepth {
					t.Fatalf("Load: %v, depth %d; want a config %d deep", err, cfg.Domain("deep").Depth(), descriptor.MaxDepth)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}
