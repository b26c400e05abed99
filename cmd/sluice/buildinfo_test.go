package main

import (
	"runtime/debug"
	"testing"
)

// TestBuildVersion: the version shown is the release tag when the release
// build sets one, else the version Go stamped, else "dev"; the revision
// and the modified flag come from Go's VCS stamps.
func TestBuildVersion(t *testing.T) {
	stamped := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sluice-rl/sluice", Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	const rev = "490e3436b5fe95469734abee16e767673d663f4f"
	tests := []struct {
		name string
		tag  string
		bi   *debug.BuildInfo
		want buildVersion
		str  string
	}{
		{"no build information", "dev", nil, buildVersion{Version: "dev"}, "dev"},
		{"go test", "dev", stamped(""), buildVersion{Version: "dev", GoVersion: "go1.26.8"}, "dev"},
		{"go build without git", "dev", stamped("(devel)"), buildVersion{Version: "dev", GoVersion: "go1.26.8"}, "dev"},
		{"go build in a clean clone", "dev",
			stamped("v0.0.0-20261129002816-490e3436b5fe", "vcs", "git", "vcs.revision", rev, "vcs.modified", "false"),
			buildVersion{Version: "v0.0.0-20261129002816-490e3436b5fe", Revision: rev, GoVersion: "go1.26.8"},
			"v0.0.0-20261129002816-490e3436b5fe (revision " + rev + ")"},
		{"go build with changes", "dev",
			stamped("v0.0.0-20261129002816-490e3436b5fe+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			buildVersion{Version: "v0.0.0-20261129002816-490e3436b5fe+dirty", Revision: rev, Modified: true, GoVersion: "go1.26.8"},
			"v0.0.0-20261129002816-490e3436b5fe+dirty (revision " + rev + ", modified)"},
		{"go install at a tag", "dev", stamped("v1.2.0"), buildVersion{Version: "v1.2.0", GoVersion: "go1.26.8"}, "v1.2.0"},
		{"the release build's tag wins", "v1.3.0",
			stamped("v0.0.0-20261129002816-490e3436b5fe", "vcs.revision", rev, "vcs.modified", "false"),
			buildVersion{Version: "v1.3.0", Revision: rev, GoVersion: "go1.26.8"}, "v1.3.0 (revision " + rev + ")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := buildVersionOf(tt.tag, tt.bi)
			if tt.bi == nil {
				tt.want.GoVersion = got.GoVersion // the running Go
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.str {
				t.Errorf("String() = %q, want %q", s, tt.str)
			}
		})
	}
}
