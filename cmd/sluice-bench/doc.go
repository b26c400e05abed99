package main

import (
	"fmt"
	"os"
	"strings"
)

// The markers around a generated block in a markdown file. They are HTML
// comments, so the rendered page shows only the block.
const (
	markerPrefix = "<!-- sluice-bench summarize: "
	endMarker    = "<!-- end -->"
)

func startMarker(name string) string { return markerPrefix + name + " -->" }

// replaceBlocks replaces the text between every start marker in doc and
// the end marker after it with the block of that name, or leaves it as it
// is when that block is marked keep. A marker naming no block, or without
// its end, is an error: the doc would keep figures of another run unsaid.
func replaceBlocks(doc string, blocks []block) (string, error) {
	byName := make(map[string]block, len(blocks))
	for _, b := range blocks {
		byName[b.name] = b
	}
	var out strings.Builder
	rest := doc
	found := 0
	for {
		i := strings.Index(rest, markerPrefix)
		if i < 0 {
			break
		}
		nameEnd := strings.Index(rest[i:], " -->")
		if nameEnd < 0 {
			return "", fmt.Errorf("marker at byte %d is not closed", len(doc)-len(rest)+i)
		}
		name := rest[i+len(markerPrefix) : i+nameEnd]
		b, ok := byName[name]
		if !ok {
			return "", fmt.Errorf("marker %q: summarize has no such block", name)
		}
		afterStart := i + nameEnd + len(" -->")
		end := strings.Index(rest[afterStart:], endMarker)
		if end < 0 {
			return "", fmt.Errorf("marker %q has no %s after it", name, endMarker)
		}
		if b.keep {
			out.WriteString(rest[:afterStart+end])
		} else {
			out.WriteString(rest[:afterStart])
			out.WriteString("\n")
			out.WriteString(b.text)
		}
		rest = rest[afterStart+end:]
		found++
	}
	if found == 0 {
		return "", fmt.Errorf("no %s...%s markers", markerPrefix, endMarker)
	}
	out.WriteString(rest)
	return out.String(), nil
}

// updateDoc rewrites the generated blocks of the markdown file at path.
func updateDoc(path string, blocks []block) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text, err := replaceBlocks(string(data), blocks)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), info.Mode().Perm())
}
