package main

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
)

// TestDecisionIndex holds docs/decisions/README.md to the records beside it:
// every file of the directory is named in the index, every record the index
// names exists, and a record the index calls replaced says so under its
// title (and one it calls current does not).
func TestDecisionIndex(t *testing.T) {
	for _, p := range checkDecisionIndex(os.DirFS("../../docs/decisions")) {
		t.Error("docs/decisions: " + p)
	}
}

// TestCheckDecisionIndex shows that checkDecisionIndex finds each kind of
// disagreement between an index and its records.
func TestCheckDecisionIndex(t *testing.T) {
	const (
		a        = "# 0001 — A\n\nText.\n"
		b        = "# 0002 — B\n\nText.\n"
		aReplBy2 = "# 0001 — A\n\n> Replaced by [0002](0002-b.md): b.\n\nText.\n"
		aPartBy2 = "# 0001 — A\n\n> Partly replaced by [0002](0002-b.md): b.\n\nText.\n"
		head     = "# Decision records\n\nIntro.\n\n| number | title | status |\n|---|---|---|\n"
		rowA     = "| 0001 | [A](0001-a.md) | current |\n"
		rowB     = "| 0002 | [B](0002-b.md) | current |\n"
	)
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the problems, in order; none for a clean index
	}{
		{"clean", map[string]string{"0001-a.md": a, "0002-b.md": b, "README.md": head + rowA + rowB}, nil},
		{"replaced, both sides say so", map[string]string{"0001-a.md": aReplBy2, "0002-b.md": b,
			"README.md": head + "| 0001 | [A](0001-a.md) | replaced by [0002](0002-b.md): b |\n" + rowB}, nil},
		{"partly replaced, both sides say so", map[string]string{"0001-a.md": aPartBy2, "0002-b.md": b,
			"README.md": head + "| 0001 | [A](0001-a.md) | partly replaced by [0002](0002-b.md): b |\n" + rowB}, nil},
		{"record not in the index", map[string]string{"0001-a.md": a, "0002-b.md": b, "README.md": head + rowA},
			[]string{"0002-b.md is not named in README.md"}},
		{"other file not in the index", map[string]string{"0001-a.md": a, "notes.txt": "x", "README.md": head + rowA},
			[]string{"notes.txt is not named in README.md"}},
		{"index names a missing file", map[string]string{"0001-a.md": a, "README.md": head + rowA + rowB},
			[]string{"README.md names 0002-b.md, which does not exist"}},
		{"status names a missing record", map[string]string{"0001-a.md": aReplBy2,
			"README.md": head + "| 0001 | [A](0001-a.md) | replaced by [0002](0002-b.md): b |\n"},
			[]string{"README.md names 0002-b.md, which does not exist"}},
		{"number and file disagree", map[string]string{"0001-a.md": a, "0002-b.md": b,
			"README.md": head + rowA + "| 0003 | [B](0002-b.md) | current |\n"},
			[]string{"row 0003 links 0002-b.md"}},
		{"a record twice", map[string]string{"0001-a.md": a, "README.md": head + rowA + rowA},
			[]string{"0001-a.md has 2 rows"}},
		{"unknown status", map[string]string{"0001-a.md": a, "README.md": head + "| 0001 | [A](0001-a.md) | old |\n"},
			[]string{`0001: status "old" is not`}},
		{"index says replaced, record does not", map[string]string{"0001-a.md": a, "0002-b.md": b,
			"README.md": head + "| 0001 | [A](0001-a.md) | replaced by [0002](0002-b.md): b |\n" + rowB},
			[]string{`0001-a.md does not begin "> Replaced by"`}},
		{"index says partly, record says whole", map[string]string{"0001-a.md": aReplBy2, "0002-b.md": b,
			"README.md": head + "| 0001 | [A](0001-a.md) | partly replaced by [0002](0002-b.md): b |\n" + rowB},
			[]string{`0001-a.md does not begin "> Partly replaced by"`}},
		{"record says replaced, index says current", map[string]string{"0001-a.md": aReplBy2, "0002-b.md": b,
			"README.md": head + rowA + rowB},
			[]string{"0001-a.md says it is replaced"}},
		{"no index", map[string]string{"0001-a.md": a}, []string{"README.md"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, text := range tc.files {
				fsys[name] = &fstest.MapFile{Data: []byte(text)}
			}
			got := checkDecisionIndex(fsys)
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d is %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

var (
	// decisionRow is one row of the index: number, linked title, status.
	decisionRow = regexp.MustCompile(`^\| (\d{4}) \| \[[^\]]+\]\(([^)]+)\) \| (.+) \|$`)
	// decisionLink is any relative link of the index.
	decisionLink = regexp.MustCompile(`\]\(([^)#:]+)\)`)
	// decisionStatus is what a row's status may say.
	decisionStatus = regexp.MustCompile(`^(current$|replaced by \[\d{4}\]|partly replaced by \[\d{4}\])`)
)

// checkDecisionIndex compares README.md of the decision records in fsys with
// the files beside it and returns each disagreement, in a stable order.
func checkDecisionIndex(fsys fs.FS) []string {
	index, err := fs.ReadFile(fsys, "README.md")
	if err != nil {
		return []string{fmt.Sprintf("reading the index README.md: %v", err)}
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return []string{fmt.Sprintf("listing the records: %v", err)}
	}
	exists := map[string]bool{}
	for _, e := range entries {
		exists[e.Name()] = true
	}

	var problems []string
	rows := map[string]int{}      // file → rows naming it
	status := map[string]string{} // file → the status of its row
	named := map[string]bool{}
	for _, line := range strings.Split(string(index), "\n") {
		for _, m := range decisionLink.FindAllStringSubmatch(line, -1) {
			named[m[1]] = true
			if !exists[m[1]] {
				problems = append(problems, fmt.Sprintf("README.md names %s, which does not exist", m[1]))
			}
		}
		m := decisionRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		number, file, st := m[1], m[2], m[3]
		if !strings.HasPrefix(file, number+"-") {
			problems = append(problems, fmt.Sprintf("row %s links %s", number, file))
		}
		if !decisionStatus.MatchString(st) {
			problems = append(problems, fmt.Sprintf("%s: status %q is not current, replaced by [NNNN] or partly replaced by [NNNN]", number, st))
		}
		rows[file]++
		status[file] = st
	}

	files := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Name() != "README.md" {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	for _, f := range files {
		if !named[f] {
			problems = append(problems, fmt.Sprintf("%s is not named in README.md", f))
		}
		if rows[f] > 1 {
			problems = append(problems, fmt.Sprintf("%s has %d rows in README.md", f, rows[f]))
		}
		st, ok := status[f]
		if !ok {
			continue
		}
		text, err := fs.ReadFile(fsys, f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("reading %s: %v", f, err))
			continue
		}
		// The line under the title, after one blank line.
		top := ""
		if lines := strings.SplitN(string(text), "\n", 4); len(lines) > 2 {
			top = lines[2]
		}
		says := strings.HasPrefix(top, "> Replaced by ") || strings.HasPrefix(top, "> Partly replaced by ")
		switch {
		case strings.HasPrefix(st, "replaced by ") && !strings.HasPrefix(top, "> Replaced by "):
			problems = append(problems, fmt.Sprintf(`%s does not begin "> Replaced by" under its title, as its row says`, f))
		case strings.HasPrefix(st, "partly replaced by ") && !strings.HasPrefix(top, "> Partly replaced by "):
			problems = append(problems, fmt.Sprintf(`%s does not begin "> Partly replaced by" under its title, as its row says`, f))
		case st == "current" && says:
			problems = append(problems, fmt.Sprintf("%s says it is replaced, where README.md calls it current", f))
		}
	}
	return problems
}
