package examplestest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// stage is the instructions from one FROM to the next.
type stage struct {
	from, name string
	body       []instruction
}

// parseDockerfile splits a Dockerfile into stages. It is a light structural
// reading (comments, line continuations, instructions), not BuildKit's
// parser: no Docker engine runs where these tests run.
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	var cur *instruction
	var all []instruction
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if cur == nil && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur != nil && (line == "" || strings.HasPrefix(line, "#")) {
			continue // blank and comment lines inside a continuation are dropped
		}
		cont := strings.HasSuffix(line, "\\")
		line = strings.TrimSuffix(line, "\\")
		if cur == nil {
			cmd, args, _ := strings.Cut(line, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args = strings.TrimSpace(cur.args + " " + strings.TrimSpace(line))
		}
		if !cont {
			all = append(all, *cur)
			cur = nil
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: continuation at end of file", cur.line)
	}
	for _, in := range all {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			return nil, fmt.Errorf("line %d: %s before the first FROM", in.line, in.cmd)
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return stages, nil
}

// find returns the stage's instructions of one kind.
func (s stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	stages, err := parseDockerfile(string(repoFile(t, "Dockerfile")))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, got %d stage(s)", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	if !strings.HasPrefix(build.from, "golang:1.26") || build.name == "" {
		t.Errorf("build stage FROM %s AS %q, want golang:1.26 with a name", build.from, build.name)
	}
	var goBuild string
	for _, in := range build.find("RUN") {
		if strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w", "-X main.version=", "./cmd/sluice"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("go build %q lacks %q", goBuild, want)
		}
	}

	if final.from != "gcr.io/distroless/static-debian12:nonroot" && final.from != "scratch" {
		t.Errorf("final stage FROM %s, want distroless static nonroot or scratch", final.from)
	}
	copies := final.find("COPY")
	if len(copies) == 0 || !strings.Contains(copies[0].args, "--from="+build.name) {
		t.Errorf("final stage must copy the binary from the build stage, got %v", copies)
	}

	// Non-root, numerically (Kubernetes cannot check a user name), and the
	// same user the Kubernetes example runs as.
	users := final.find("USER")
	if len(users) != 1 {
		t.Fatalf("final stage has %d USER instructions, want 1", len(users))
	}
	uid, _, _ := strings.Cut(users[0].args, ":")
	n, err := strconv.Atoi(uid)
	if err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root uid", users[0].args)
	}
	k := loadKubernetesExample(t)
	if ru := k.deployments[0].Spec.Template.Spec.SecurityContext.RunAsUser; ru == nil || *ru != int64(n) {
		t.Errorf("image user %d differs from the Deployment's runAsUser %v", n, ru)
	}

	exposes := final.find("EXPOSE")
	if len(exposes) != 1 || !slices.Equal(strings.Fields(exposes[0].args), []string{"8080", "8081"}) {
		t.Errorf("EXPOSE %v, want 8080 8081", exposes)
	}
	entry := final.find("ENTRYPOINT")
	var argv []string
	if len(entry) != 1 || json.Unmarshal([]byte(entry[0].args), &argv) != nil || !slices.Equal(argv, []string{"/sluice", "serve"}) {
		t.Errorf("ENTRYPOINT %v, want the exec form [\"/sluice\", \"serve\"]", entry)
	}
	// The image must read its config where the incumbent's image does, from
	// the RUNTIME_* variables a deployment swapping images already sets:
	// SLUICE_CONFIG in the image would override them.
	for _, in := range final.find("ENV") {
		if strings.Contains(in.args, "SLUICE_CONFIG") {
			t.Errorf("line %d: ENV %s: SLUICE_CONFIG in the image overrides the RUNTIME_* variables of an envoyproxy/ratelimit deployment", in.line, in.args)
		}
	}
}

func TestDockerignore(t *testing.T) {
	var lines []string
	for _, l := range strings.Split(string(repoFile(t, ".dockerignore")), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	for _, want := range []string{".git"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	// The build needs these: never exclude them.
	for _, need := range []string{"go.mod", "go.sum", "cmd", "pkg", "*.go", "*"} {
		if slices.Contains(lines, need) || slices.Contains(lines, "/"+need) {
			t.Errorf(".dockerignore excludes %s, which the build needs", need)
		}
	}
}

func TestParseDockerfile(t *testing.T) {
	text := "ARG X=1\nFROM a AS b\n# c\nRUN one \\\n  # inner comment\n  two\nFROM c\nUSER 1\n"
	stages, err := parseDockerfile(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].name != "b" || stages[1].from != "c" {
		t.Fatalf("stages %+v", stages)
	}
	if r := stages[0].find("RUN"); len(r) != 1 || r[0].args != "one two" {
		t.Errorf("RUN %+v, want one joined instruction \"one two\"", r)
	}
	if _, err := parseDockerfile("FROM a\nRUN x \\\n"); err == nil {
		t.Errorf("dangling continuation accepted")
	}
}
