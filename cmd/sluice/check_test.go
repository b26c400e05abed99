package main

import (
	"strings"
	"testing"
)

// TestCheckForScripts: check's exit code says OK (0), OVER_LIMIT (1) or
// error (2); --descriptor-hits 0 peeks without consuming; --limit
// overrides the configured limit; --entry carries a value with commas; a
// second descriptor's flags apply to it alone.
func TestCheckForScripts(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", adminConfig)
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir})
	steps := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"peek a fresh user", []string{"--entry", "user=a,b", "--descriptor-hits", "0"}, 0, "remaining 2"},
		{"peek again: nothing consumed", []string{"--entry", "user=a,b", "--descriptor-hits", "0"}, 0, "remaining 2"},
		{"take 2 at once", []string{"--entry", "user=a,b", "--descriptor-hits", "2"}, 0, "remaining 0"},
		{"over the limit", []string{"--entry", "user=a,b"}, 1, "OVER_LIMIT"},
		{"the value is one entry, not split on commas", []string{"--descriptor", "user=a"}, 0, "remaining 1"},
		{"limit override", []string{"--entry", "user=z", "--limit", "7/5minute"}, 0, "limit 7 per 5 minutes  remaining 6"},
		{"two descriptors, hits on the second only", []string{"--descriptor", "user=c", "--descriptor", "user=d", "--descriptor-hits", "3"}, 1,
			"[1] user=c: OK"},
		{"unknown domain is OK", []string{"--domain", "nope", "--descriptor", "user=c"}, 0, "overall: OK"},
	}
	for _, st := range steps {
		args := append([]string{"check", "--addr", s.grpc, "--domain", "api"}, st.args...)
		code, out, errOut := runCmd(t, nil, args...)
		if code != st.code || !strings.Contains(out, st.out) {
			t.Errorf("%s: exit %d\n%s%s\nwant exit %d and %q", st.name, code, out, errOut, st.code, st.out)
		}
	}
}
