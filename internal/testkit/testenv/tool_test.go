package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFind: the first existing path wins, empty paths are passed over; a
// missing tool skips the test, or fails it where CI=true, saying how to
// install it.
func TestFindTool(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name          string
		ci            string
		paths         []string
		want          string
		fail, skipped string
	}{
		{name: "found after an empty and a missing path", paths: []string{"", missing, tool}, want: tool},
		{name: "found in CI", ci: "true", paths: []string{tool}, want: tool},
		{name: "missing on a workstation", paths: []string{"", missing},
			skipped: "tool is not installed (apt-get install tool); CI fails here instead"},
		{name: "missing in CI", ci: "true", paths: []string{missing},
			fail: "tool is not installed: apt-get install tool"},
		{name: "no paths in CI", ci: "true", fail: "tool is not installed: apt-get install tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			var got string
			r := RunHelper(t, func(tb testing.TB) { got = FindTool(tb, "tool", "apt-get install tool", tt.paths...) })
			if got != tt.want || r.Failed != tt.fail || r.Skipped != tt.skipped {
				t.Errorf("got %q, failed %q, skipped %q; want %q, failed %q, skipped %q",
					got, r.Failed, r.Skipped, tt.want, tt.fail, tt.skipped)
			}
		})
	}
}
