package scripts

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// TestDecidePartsCoverEveryFile: every .lua file of the package is a part
// of the decide script or the reset script, once, so that no file is silently left out of it
// (or in it twice), and the joined source is what Decide runs.
func TestDecidePartsCoverEveryFile(t *testing.T) {
	files, err := fs.Glob(lua, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	parts := slices.Concat(decideParts, resetParts)
	slices.Sort(parts)
	slices.Sort(files)
	if !slices.Equal(parts, files) {
		t.Fatalf("decideParts %v, want exactly the .lua files %v", parts, files)
	}
	if decideParts[0] != "decide.lua" {
		t.Errorf("first part %q, want the entry decide.lua", decideParts[0])
	}
	src := DecideScript().Source
	for _, name := range decideParts {
		b, _ := lua.ReadFile(name)
		if !strings.Contains(src, string(b)) {
			t.Errorf("the script does not hold %s", name)
		}
	}
	if again := newScript(join(lua, decideParts) + evalTail); again != DecideScript() {
		t.Errorf("joining the parts again gives SHA %s, want %s", again.SHA1, DecideScript().SHA1)
	}
	// The function library is the same parts, registering decide_call
	// under a name of this version.
	lib := DecideLibrary()
	if body, ok := strings.CutSuffix(src, evalTail); !ok || !strings.Contains(lib.Source, body) {
		t.Errorf("the function library does not hold the script's parts")
	}
	if !strings.HasPrefix(lib.Source, "#!lua name="+lib.Name+"\n") || !strings.Contains(lib.Name, DecideScript().SHA1[:16]) ||
		!strings.HasSuffix(lib.Source, "redis.register_function('"+lib.Function+"', decide_call)\n") {
		t.Errorf("function library %q / %q is not named after the script's SHA-1 %s", lib.Name, lib.Function, DecideScript().SHA1)
	}
}
