package examplestest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// sluiceImage matches an image: field naming sluice's image.
var sluiceImage = regexp.MustCompile(`(?m)^\s*image:\s*"?([^"\s#]*sluice[^"\s#]*)`)

// TestImagesPinned: every example and the chart run sluice's published
// image pinned to one release, the chart's appVersion, never a floating
// tag; each file that names it says how to build and push it until that
// release is published (or points to the Dockerfile, which says).
func TestImagesPinned(t *testing.T) {
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	b, err := os.ReadFile(repoPath(t, "charts/sluice/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(chart.AppVersion) {
		t.Fatalf("the chart's appVersion %q is not a release tag vX.Y.Z", chart.AppVersion)
	}
	want := "ghcr.io/sluice-rl/sluice:" + chart.AppVersion

	var values struct {
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
	}
	b, err = os.ReadFile(repoPath(t, "charts/sluice/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository+":"+chart.AppVersion != want || values.Image.Tag != "" {
		t.Errorf("the chart's image is %s:%s, want %s (an empty tag, the appVersion)", values.Image.Repository, values.Image.Tag, want)
	}

	found := 0
	err = filepath.WalkDir(repoPath(t, "examples"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range sluiceImage.FindAllStringSubmatch(string(b), -1) {
			found++
			if m[1] != want {
				t.Errorf("%s: image %s, want %s", path, m[1], want)
			}
			if !strings.Contains(string(b), "build and push") {
				t.Errorf("%s names the image but does not say how to build and push it until the release", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 2 {
		t.Errorf("found %d image fields naming sluice in examples/, want the Kubernetes and Envoy Gateway ones at least", found)
	}
	dockerfile, err := os.ReadFile(repoPath(t, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), "-t "+want+" --push") {
		t.Errorf("the Dockerfile does not say how to build and push %s", want)
	}
}
