package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is the release tag, set by the release build with -ldflags
// "-X main.version=v1.2.3" (Dockerfile, .github/workflows/release.yml).
// Without it the version is the one Go stamps into the build (see
// readBuildVersion).
var version = "dev"

// revision is the commit built, set with -ldflags "-X main.revision=..."
// by the image build, whose context has no .git for Go to stamp it from;
// a revision Go stamped wins.
var revision = ""

// buildVersion describes the running binary, from Go's build information:
// what `sluice version`, the admin page and API, and the sluice_build_info
// metric show.
type buildVersion struct {
	// Version is the release tag given with -X main.version; else the
	// main module's version Go stamped (a pseudo-version naming the commit
	// when built with `go build` in a git checkout, or the tag of
	// `go install ...@v1.2.3`); else "dev".
	Version string
	// Revision is the VCS commit the binary was built from (vcs.revision),
	// "" when the build did not record one (go test, -buildvcs=false, a
	// tree without git).
	Revision string
	// Modified says the working tree had changes not committed
	// (vcs.modified).
	Modified bool
	// GoVersion is the Go release that built it.
	GoVersion string
}

// readBuildVersion reads the running binary's buildVersion.
func readBuildVersion() buildVersion {
	bi, _ := debug.ReadBuildInfo()
	v := buildVersionOf(version, bi)
	if v.Revision == "" {
		v.Revision = revision
	}
	return v
}

// buildVersionOf is readBuildVersion for a given -X version and build
// information (nil when the binary has none).
func buildVersionOf(tag string, bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: tag, GoVersion: runtime.Version()}
	if bi == nil {
		return v
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	if (v.Version == "" || v.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the version, then the revision and whether the tree was
// modified when known: "v1.2.0 (revision 0123abcd..., modified)".
func (v buildVersion) String() string {
	var extra []string
	if v.Revision != "" {
		extra = append(extra, "revision "+v.Revision)
	}
	if v.Modified {
		extra = append(extra, "modified")
	}
	if len(extra) == 0 {
		return v.Version
	}
	return fmt.Sprintf("%s (%s)", v.Version, strings.Join(extra, ", "))
}
