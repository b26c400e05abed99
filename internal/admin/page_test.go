package admin

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium returns the headless browser's path. When it is missing the
// test is skipped on a workstation and fails in CI (CI=true), where the
// page must be checked.
func chromium(t *testing.T) string {
	t.Helper()
	return testenv.FindTool(t, "chromium", "set SLUICE_CHROMIUM or install the chromium package",
		os.Getenv("SLUICE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser")
}

// headless runs chromium on url with extra flags and returns its stdout.
func headless(t *testing.T, bin, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1100", "--hide-scrollbars"}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return string(out)
}

// TestLivePageInChromium drives 15 minutes of traffic (one client far over
// its limit), loads the admin page in headless Chromium, checks what the
// rendered DOM says, and checks the screenshot: mostly not blank, with the
// blue decisions line and the red denials line drawn.
func TestLivePageInChromium(t *testing.T) {
	bin := chromium(t)
	f := newFixture(t, Options{})
	f.traffic(t)

	dom := headless(t, bin, f.base+"/", "--dump-dom")
	for _, want := range []string{
		"Decisions and denials per second",
		`aria-label="rates of api"`,
		"<polyline",
		"user=mallory", // the top denied descriptor
		"per_user",     // its binding rule
		"Top descriptors by hits",
		"in process",     // the backend
		"last reload",    // the config section
		"test-host",      // instance info
		"127.0.0.1:8081", // a listener
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if i, j := strings.Index(dom, `id="denied"`), strings.Index(dom, "user=mallory"); i < 0 || j < i {
		t.Errorf("user=mallory is not in the top denied section")
	}

	shot := filepath.Join(t.TempDir(), "page.png")
	headless(t, bin, f.base+"/", "--screenshot="+shot)
	if dst := os.Getenv("SLUICE_PAGE_SCREENSHOT"); dst != "" {
		b, _ := os.ReadFile(shot)
		os.WriteFile(dst, b, 0o644)
	}
	img := decodePNG(t, shot)
	b := img.Bounds()
	if b.Dx() < 800 || b.Dy() < 600 {
		t.Fatalf("screenshot is %v, want the 1280x1100 window", b)
	}
	bg := img.At(b.Min.X+b.Dx()/2, b.Max.Y-2) // the page background, bottom centre
	var ink, blue, red int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := img.At(x, y)
			if !near(c, bg, 12) {
				ink++
			}
			if near(c, color.RGBA{0x25, 0x63, 0xeb, 0xff}, 40) {
				blue++
			}
			if near(c, color.RGBA{0xdc, 0x26, 0x26, 0xff}, 40) {
				red++
			}
		}
	}
	total := b.Dx() * b.Dy()
	t.Logf("screenshot %v: %d of %d pixels differ from the background, %d blue, %d red", b, ink, total, blue, red)
	if ink < total/20 {
		t.Errorf("the screenshot is nearly blank: %d of %d pixels differ from the background", ink, total)
	}
	if blue < 200 || red < 200 {
		t.Errorf("the chart's lines are missing: %d blue and %d red pixels, want at least 200 each", blue, red)
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	img, err := png.Decode(fh)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	return img
}

// near reports whether a and b differ by at most d in every channel.
func near(a, b color.Color, d int) bool {
	ar, ag, ab, _ := a.RGBA()
	br, bg, bb, _ := b.RGBA()
	diff := func(x, y uint32) bool {
		v := int(x>>8) - int(y>>8)
		return v >= -d && v <= d
	}
	return diff(ar, br) && diff(ag, bg) && diff(ab, bb)
}
