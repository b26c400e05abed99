package examplestest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvoyHeaderClaims holds the docs and examples to what Envoy's API
// says of enable_x_ratelimit_headers (envoy.extensions.filters.http.
// ratelimit.v3.RateLimit): with DRAFT_VERSION_03, Envoy itself emits
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset. Those
// are not the RateLimit-* headers sluice adds (LIMIT_RESPONSE_HEADERS_ENABLED),
// and no text near a mention of the setting may say they are.
func TestEnvoyHeaderClaims(t *testing.T) {
	root := filepath.Join("..", "..")
	var files []string
	for _, dir := range []string{"docs", "examples"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := filepath.Ext(p); !d.IsDir() && (ext == ".md" || ext == ".yaml" || ext == ".yml") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	files = append(files, filepath.Join(root, "README.md"))
	mentions := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i, l := range lines {
			if !strings.Contains(l, "DRAFT_VERSION_03") && !strings.Contains(l, "enable_x_ratelimit_headers") && !strings.Contains(strings.ToLower(l), "draft 03") {
				continue
			}
			mentions++
			// The claim is on the same line (docs) or in the comment lines
			// just above the setting (YAML).
			from := i
			if filepath.Ext(f) != ".md" {
				from = max(0, i-3)
			}
			window := strings.Join(lines[from:i+1], "\n")
			lower := strings.ToLower(window)
			stripped := strings.ReplaceAll(lower, "x-ratelimit-", "")
			if strings.Contains(stripped, "ratelimit-") && !strings.Contains(lower, "x-ratelimit-limit") {
				t.Errorf("%s:%d: says Envoy's enable_x_ratelimit_headers emits RateLimit-* headers; Envoy emits x-ratelimit-limit, -remaining, -reset:\n%s",
					f, i+1, window)
			}
		}
	}
	if mentions == 0 {
		t.Fatal("no file mentions enable_x_ratelimit_headers: the walk found nothing")
	}
}
