package main

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

// TestDocsListEverySetting holds docs/configuration.md to the code: every
// flag of sluice serve and every environment variable that sets one is
// written out in full (as `--flag` and `VARIABLE`), so a setting cannot be
// added without its documented default and meaning.
func TestDocsListEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	names := serveFlags(fs, &settings{source: map[string]string{}})
	if len(names) == 0 {
		t.Fatal("serveFlags defined no settings")
	}
	for _, n := range names {
		for _, want := range []string{"`--" + n.flag + "`", "`" + n.env + "`"} {
			if !strings.Contains(text, want) {
				t.Errorf("docs/configuration.md does not name %s", want)
			}
		}
	}
}
