package descriptor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. It must never panic; every
// error must be a non-empty ErrorList whose entries name the file and give
// a reason; a config that parses must be consistent (depths, parents) and
// every node reached only through exact values must be matched by its own
// key/value path.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "testdata/errors/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("domain: d\ndescriptors: [{key: a, value: 'x*y*', rate_limit: {unit: second}}]"))
	f.Add([]byte("domain: &d d\n<<: {descriptors: []}"))
	f.Add([]byte("- &a [*a]"))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		domains, err := Parse(name, data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error %T is not an ErrorList: %v", err, err)
			}
			if len(list) == 0 {
				t.Fatal("empty ErrorList returned as an error")
			}
			for _, e := range list {
				if e == nil || e.File != name || e.Reason == "" || e.Line < 0 {
					t.Fatalf("bad error entry %#v", e)
				}
			}
			return
		}
		if len(domains) == 0 {
			t.Fatal("no error and no domain")
		}
		for _, d := range domains {
			if d.Name == "" {
				t.Fatal("domain without a name")
			}
			d.Walk(func(n *Node) {
				if n.Key == "" {
					t.Fatalf("node without key at line %d", n.Line)
				}
				want := 1
				if n.Parent != nil {
					want = n.Parent.Depth + 1
				}
				if n.Depth != want {
					t.Fatalf("node %q depth %d, want %d", n.Path(), n.Depth, want)
				}
				var entries []Entry
				for x := n; x != nil; x = x.Parent {
					if x.Wildcard || x.Value == "" {
						return
					}
					entries = append([]Entry{{Key: x.Key, Value: x.Value}}, entries...)
				}
				if got := d.Match(entries); got != n {
					t.Fatalf("Match(%q) = %v, want the node at line %d", entries, got, n.Line)
				}
			})
		}
		if c, err := NewConfig(domains...); err == nil {
			_ = c.Dump()
		}
	})
}
