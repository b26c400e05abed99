package descriptor

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// want is one expected error: a line (0 for the file as a whole) and a
// substring of its reason.
type want struct {
	line   int
	reason string
	// warn marks something the reference ignores: a warning by default,
	// an error in strict mode (`# warn "reason"`).
	warn bool
}

var (
	wantComment = regexp.MustCompile(`(want|warn)(-file)?((?:\s+"(?:[^"\\]|\\.)*")+)`)
	quoted      = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
)

// readWants collects the `# want "reason"...` annotations of a fixture: each
// expects an error at the annotation's line (`want-file`: at line 0); and
// the `# warn "reason"` ones, each expecting a warning (an error in strict
// mode).
func readWants(t *testing.T, data []byte) []want {
	t.Helper()
	var wants []want
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		for _, m := range wantComment.FindAllStringSubmatch(sc.Text(), -1) {
			at := line
			if m[2] != "" {
				at = 0
			}
			wants = appendWants(t, wants, line, at, m[1] == "warn", m[3])
		}
	}
	return wants
}

// appendWants appends the quoted reasons of one annotation.
func appendWants(t *testing.T, wants []want, line, at int, warn bool, reasons string) []want {
	t.Helper()
	for _, q := range quoted.FindAllString(reasons, -1) {
		s, err := strconv.Unquote(q)
		if err != nil {
			t.Fatalf("line %d: bad want %s: %v", line, q, err)
		}
		wants = append(wants, want{line: at, reason: s, warn: warn})
	}
	return wants
}

// checkErrors asserts that err is an ErrorList matching wants exactly: each
// error is wanted, at its line, in file, and each want is met once.
func checkErrors(t *testing.T, file string, err error, wants []want) {
	t.Helper()
	var list ErrorList
	if len(wants) == 0 {
		if err != nil {
			t.Fatalf("unexpected errors:\n%v", err)
		}
		return
	}
	if !errors.As(err, &list) {
		t.Fatalf("error is %T (%v), want ErrorList", err, err)
	}
	met := make([]bool, len(wants))
	for _, e := range list {
		if e.File != file {
			t.Errorf("error %q has file %q, want %q", e, e.File, file)
		}
		found := false
		for i, w := range wants {
			if !met[i] && w.line == e.Line && strings.Contains(e.Reason, w.reason) {
				met[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("unexpected error: %v", e)
		}
	}
	for i, w := range wants {
		if !met[i] {
			t.Errorf("missing error at line %d: %q", w.line, w.reason)
		}
	}
}

// TestParseErrors parses every fixture under testdata/errors and checks its
// errors against the fixture's own `# want` annotations, and its warnings
// against the `# warn` ones; in strict mode, both are errors.
func TestParseErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			all := readWants(t, data)
			if len(all) == 0 {
				t.Fatal("fixture has no want annotation")
			}
			var errs, warns []want
			for _, w := range all {
				if w.warn {
					warns = append(warns, w)
				} else {
					errs = append(errs, w)
				}
			}
			domains, err := Parse(f, data)
			checkErrors(t, f, err, errs)
			var got ErrorList
			for _, d := range domains {
				for _, w := range d.warnings {
					got = append(got, &Error{File: f, Line: lineOf(t, f, w), Reason: w})
				}
			}
			t.Run("warnings", func(t *testing.T) { checkErrors(t, f, got.err(), warns) })
			_, err = parse(f, data, ReadOptions{Strict: true})
			t.Run("strict", func(t *testing.T) { checkErrors(t, f, err, all) })
		})
	}
}

// lineOf reads the line of a "file:line: reason" warning of file.
func lineOf(t *testing.T, file, w string) int {
	t.Helper()
	rest, ok := strings.CutPrefix(w, file+":")
	if !ok {
		t.Fatalf("warning %q does not name %s", w, file)
	}
	n, _, _ := strings.Cut(rest, ":")
	line, err := strconv.Atoi(n)
	if err != nil {
		t.Fatalf("warning %q has no line", w)
	}
	return line
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&Error{File: "a.yaml", Line: 3, Reason: "bad"}, "a.yaml:3: bad"},
		{&Error{File: "a.yaml", Reason: "cannot read"}, "a.yaml: cannot read"},
		{ErrorList{{File: "a", Line: 1, Reason: "x"}, {File: "b", Reason: "y"}}, "a:1: x\nb: y"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
