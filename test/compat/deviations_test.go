package compat

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// guide is the migration guide whose deviation table lists every
// difference a case may name.
const guide = "../../docs/migrating-from-envoy-ratelimit.md"

// deviation names a difference from the incumbent: its ID in the guide's
// table, or a known gap not fixed yet (see pending).
type deviation struct{ id string }

// registry holds every deviation the cases name, by ID.
var registry = map[string]*deviation{}

// dev declares a difference the migration guide's table lists under id.
// TestDeviationsListed fails if the table does not list it (pending gaps
// excepted).
func dev(id string) *deviation {
	if d, ok := registry[id]; ok {
		return d
	}
	d := &deviation{id: id}
	registry[id] = d
	return d
}

// pending are the differences known but not yet fixed: ID → what is
// missing. This is the one place they are marked. A case whose answer
// matches the incumbent again logs that its mark can go; remove the entry
// (and the case's dev(...) alternative, unless the table lists it) once
// the fix is in.
var pending = map[string]string{
	// none: every known gap is fixed on main
}

// Declared deviations, one variable per ID the cases name.
var (
	devTypedErrors       = dev("typed-errors")
	devPerSecond         = dev("redis-persecond")
	devDotfiles          = dev("dotfiles-skipped")
	devRemainingOnDenial = dev("remaining-on-denial")
	devDeniedNothing     = dev("denied-consumes-nothing")
)

// alt is sluice's answer where it differs from the incumbent's by dev.
type alt[T comparable] struct {
	dev *deviation
	val T
}

// because names sluice's different answer val and the deviation d that
// explains it.
func because[T comparable](d *deviation, val T) alt[T] { return alt[T]{d, val} }

// expect checks got against the incumbent's answer want. When they
// differ, got must be one of the alternatives, each explained by a
// deviation; any other answer fails. An alternative of a pending gap
// whose case now answers as the incumbent is logged, so its mark can go.
func expect[T comparable](t *testing.T, what string, got, want T, alts ...alt[T]) {
	t.Helper()
	if got == want {
		for _, a := range alts {
			if _, isPending := pending[a.dev.id]; isPending && a.val != want {
				t.Logf("%s: answered as the incumbent; the pending gap %q may be fixed: remove its mark", what, a.dev.id)
			}
		}
		return
	}
	for _, a := range alts {
		if got == a.val {
			t.Logf("%s: differs from the incumbent by %q: %v instead of %v", what, a.dev.id, got, want)
			return
		}
	}
	var also []string
	for _, a := range alts {
		also = append(also, a.dev.id+": "+toString(a.val))
	}
	if len(also) == 0 {
		t.Errorf("%s: got %v, the incumbent answers %v", what, got, want)
		return
	}
	t.Errorf("%s: got %v, the incumbent answers %v (listed differences: %s)", what, got, want, strings.Join(also, "; "))
}

func toString(v any) string { return fmt.Sprint(v) }

// tableRow matches a row of the deviation table: "| `id` | ...".
var tableRow = regexp.MustCompile("^\\| `([a-z0-9-]+)` \\|")

// listedIDs reads the IDs of the guide's deviation table (the section
// "Every difference").
func listedIDs(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open(guide)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := map[string]int{}
	in := false
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(text, "## ") {
			in = text == "## Every difference"
			continue
		}
		if m := tableRow.FindStringSubmatch(text); in && m != nil {
			if prev, dup := ids[m[1]]; dup {
				t.Errorf("%s:%d: deviation %q listed twice (first on line %d)", guide, line, m[1], prev)
			}
			ids[m[1]] = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 {
		t.Fatalf("%s: no deviation table under \"## Every difference\"", guide)
	}
	return ids
}

// TestDeviationsListed: every difference a case names is listed in the
// migration guide's deviation table, or marked pending; every pending mark
// is named by a case.
func TestDeviationsListed(t *testing.T) {
	ids := listedIDs(t)
	var names []string
	for id := range registry {
		names = append(names, id)
	}
	sort.Strings(names)
	for _, id := range names {
		_, listed := ids[id]
		_, isPending := pending[id]
		if !listed && !isPending {
			t.Errorf("deviation %q is named by a case but not listed in %s (nor pending)", id, guide)
		}
	}
	for id := range pending {
		if _, named := registry[id]; !named {
			t.Errorf("pending gap %q is named by no case: remove its mark", id)
		}
	}
}

// TestDeviationsSayHowToRestore: every row of the deviation table says in
// its last column how to get the incumbent's behaviour back, or, starting
// with "none:", why there is no way; a bare "—" leaves the reader
// guessing.
func TestDeviationsSayHowToRestore(t *testing.T) {
	data, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for i, text := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(text, "## ") {
			in = text == "## Every difference"
			continue
		}
		m := tableRow.FindStringSubmatch(text)
		if !in || m == nil {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimSpace(text), "|"), " | ")
		restore := strings.TrimSpace(cells[len(cells)-1])
		if restore == "" || strings.HasPrefix(restore, "—") || restore == "none" || restore == "none:" {
			t.Errorf("%s:%d: deviation %q: the restore column says %q; name the setting that restores the incumbent's behaviour, or say \"none: <why>\"",
				guide, i+1, m[1], restore)
		}
	}
}
