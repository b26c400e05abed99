package main

import (
	"bytes"
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// runCmd runs the program in-process and returns its exit code and output.
func runCmd(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, env, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func writeConfig(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	testenv.ReplaceFile(t, p, content)
	return p
}

func limitConfig(domain string, perMinute int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " +
		strconv.Itoa(perMinute) + "}\n"
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := runCmd(t, nil, "version")
	if code != 0 || out != "sluice dev "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n" {
		t.Errorf("version: %d %q", code, out)
	}
	code, out, _ = runCmd(t, nil, "help")
	if code != 0 || !strings.Contains(out, "sluice validate") {
		t.Errorf("help: %d %q", code, out)
	}
	if code, _, errOut := runCmd(t, nil, "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %d %q", code, errOut)
	}
	if code, _, _ := runCmd(t, nil); code != 2 {
		t.Errorf("no command: %d, want 2", code)
	}
}

func TestValidate(t *testing.T) {
	good := t.TempDir()
	writeConfig(t, good, "a.yaml", limitConfig("a", 1))
	writeConfig(t, good, "sub/b.yml", limitConfig("b", 1))

	bad := t.TempDir()
	badFile := writeConfig(t, bad, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - value: x\n")

	bigLog := t.TempDir()
	bigLogFile := writeConfig(t, bigLog, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 100000}\n")

	split := t.TempDir()
	writeConfig(t, split, "a1.yaml", "domain: a\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	writeConfig(t, split, "a2.yaml", "domain: a\ndescriptors:\n  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 1}\n")

	// What the incumbent loads, ignoring parts of it (regression: each
	// made validate and serve exit 1).
	lenient := t.TempDir()
	lenientFile := writeConfig(t, lenient, "limits", "domain: a\nunit: second\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")

	dotted := t.TempDir()
	dotFile := writeConfig(t, dotted, ".a.yaml", "domain: a\n")

	tests := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantOut  []string // lines of stdout, in order (each a prefix)
	}{
		{"dot-files skipped", nil, []string{dotted}, 0, []string{"warning: " + dotFile + ": not read", "0 domains OK"}},
		{"dot-files read by env", []string{"RUNTIME_IGNOREDOTFILES=false"}, []string{dotted}, 0, []string{"1 domain OK: a"}},
		{"dot-files read by flag", nil, []string{"--runtime-ignoredotfiles=false", dotted}, 0, []string{"1 domain OK: a"}},
		{"dot-files flag beats env", []string{"RUNTIME_IGNOREDOTFILES=false"}, []string{"--runtime-ignoredotfiles=true", dotted}, 0, []string{"warning: ", "0 domains OK"}},
		{"bad dot-files env", []string{"RUNTIME_IGNOREDOTFILES=perhaps"}, []string{dotted}, 2, nil},
		{"good directory", nil, []string{good}, 0, []string{"2 domains OK: a, b"}},
		{"one file", nil, []string{filepath.Join(good, "a.yaml")}, 0, []string{"1 domain OK: a"}},
		{"example config", nil, []string{"../../examples/config"}, 0, []string{"1 domain OK: api"}},
		{"every error with file and line", nil, []string{bad}, 1, []string{badFile + ":4: ", badFile + ":5: "}},
		{"a warning does not fail", nil, []string{bigLog}, 0, []string{"warning: " + bigLogFile + ":3: a.k: sliding_log 100000/1 hour keeps one entry per admitted request", "1 domain OK: a"}},
		{"duplicate domain", nil, []string{split}, 1, []string{filepath.Join(split, "a2.yaml") + ":1: duplicate domain 'a'"}},
		{"merge by flag", nil, []string{"--merge-domain-config", split}, 0, []string{"1 domain OK: a"}},
		{"merge by env", []string{"MERGE_DOMAIN_CONFIG=true"}, []string{split}, 0, []string{"1 domain OK: a"}},
		{"flag beats env", []string{"MERGE_DOMAIN_CONFIG=true"}, []string{"--merge-domain-config=false", split}, 1, nil},
		{"bad env", []string{"MERGE_DOMAIN_CONFIG=perhaps"}, []string{split}, 2, nil},
		{"missing path", nil, []string{filepath.Join(good, "nope")}, 1, []string{filepath.Join(good, "nope") + ": "}},
		{"no path", nil, nil, 2, nil},
		{"what the incumbent ignores is a warning", nil, []string{lenient}, 0, []string{"warning: " + lenientFile + ":2: key 'unit' means nothing in the domain root and is ignored", "1 domain OK: a"}},
		{"strict refuses it", nil, []string{"--strict", lenient}, 1, []string{lenientFile + ":2: key 'unit' means nothing in the domain root"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, tt.env, append([]string{"validate"}, tt.args...)...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, out, errOut)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(tt.wantOut) > 0 && len(lines) != len(tt.wantOut) {
				t.Fatalf("stdout has %d lines, want %d:\n%s", len(lines), len(tt.wantOut), out)
			}
			for i, w := range tt.wantOut {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d: %q, want prefix %q", i+1, lines[i], w)
				}
			}
		})
	}
}
