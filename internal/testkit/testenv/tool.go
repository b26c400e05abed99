// Package testtool finds the external programs a test needs beside Go
// (helm, chromium). A missing one skips the test on a workstation and
// fails it in CI (CI=true), where every check must run: the one rule for
// such tools, kept in one place.

package testenv

import (
	"os"
	"testing"
)

// FindTool returns the first of paths that exists; empty paths are passed
// over. When none exists the test is skipped, or failed where CI=true,
// with a message that names the tool and how to install it.
func FindTool(t testing.TB, name, install string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed: %s", name, install)
	}
	t.Skipf("%s is not installed (%s); CI fails here instead", name, install)
	return ""
}
