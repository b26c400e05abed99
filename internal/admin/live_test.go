package admin

import (
	"context"
	"encoding/json"
	"image"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// liveConfig adds to testConfig a node in shadow mode and a domain that
// answers by failure_mode allow when the backend cannot decide.
const liveConfig = testConfig + `  - key: trial
    shadow_mode: true
    rate_limit: {name: trial_limit, unit: minute, requests_per_unit: 2}
---
domain: open
failure_mode: allow
descriptors:
  - key: user
    rate_limit: {name: open_user, unit: minute, requests_per_unit: 1000}
`

// liveTraffic is fixture traffic plus what the page shows apart: a
// shadow-mode node far over its limit, calls refused for a request bound
// (more than 4 descriptors) and malformed calls.
func liveTraffic(t *testing.T, f *fixture) {
	t.Helper()
	f.traffic(t)
	for range 20 {
		f.svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor("trial", "t")))
	}
	many := make([]*rlv3.RateLimitDescriptor, 5)
	for i := range many {
		many[i] = stacktest.Descriptor("user", "x")
	}
	for range 3 {
		if _, err := f.svc.ShouldRateLimit(context.Background(), stacktest.Request("api", many...)); err == nil {
			t.Fatal("a call over the descriptor bound was answered")
		}
	}
	f.svc.ShouldRateLimit(context.Background(), stacktest.Request(""))
	f.clock.Advance(10 * time.Second) // all of it in the last full bucket
}

// load calls the service from 4 goroutines, at most 5000 calls each,
// until stop is closed, and returns a function that waits for them.
func load(f *fixture, stop <-chan struct{}) func() {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				select {
				case <-stop:
					return
				default:
				}
				user := "load-" + string(rune('a'+g)) + "-" + string(rune('a'+i%20))
				f.svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor("user", user), stacktest.Descriptor("trial", user)))
			}
		})
	}
	return wg.Wait
}

// screenshot takes a screenshot of url in headless Chromium, copies it to
// $SLUICE_PAGE_SCREENSHOT_DIR/name when that is set (to look at), and
// returns it decoded.
func screenshot(t *testing.T, bin, url, name string) image.Image {
	t.Helper()
	shot := filepath.Join(t.TempDir(), name)
	headless(t, bin, url, "--screenshot="+shot, "--window-size=1280,2000")
	if dir := os.Getenv("SLUICE_PAGE_SCREENSHOT_DIR"); dir != "" {
		b, _ := os.ReadFile(shot)
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	return decodePNG(t, shot)
}

// countColor counts the pixels of img within 40 of c in every channel.
func countColor(img image.Image, c color.Color) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if near(img.At(x, y), c, 40) {
				n++
			}
		}
	}
	return n
}

// TestLivePageFleetUnderLoad loads the live page in headless Chromium
// while four goroutines call the service: the page shows shadow-mode
// denials apart from denials (their own line, and not in the top
// denied), the refused and malformed calls with their reasons, links to
// every admin endpoint, and a fleet of three: itself, a peer it was given
// (SLUICE_ADMIN_PEERS), a peer announced in a real Redis (the roster),
// and a configured peer that is down, shown as not answering.
func TestLivePageFleetUnderLoad(t *testing.T) {
	bin := chromium(t)
	quiet := stacktest.QuietLogger()
	srv := redistest.Standalone(t)
	newRedis := func() *redis.Backend {
		b, err := redis.New(context.Background(), redis.Options{URL: srv.Addr(), KeyPrefix: "fleet_", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	// Each instance has its own clock, all starting at one instant.
	newInstance := func(opts Options) *fixture {
		clock := testenv.NewClock(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))
		bounds := service.Options{Bounds: service.RequestBounds{MaxDescriptors: 4}}
		return newFixtureConfig(t, clock, stacktest.Memory(t, memory.Options{Now: clock.Now, SweepInterval: -1}), bounds, liveConfig, opts)
	}
	peer, announced := newInstance(Options{}), newInstance(Options{})

	// The announced peer keeps its entry in Redis, as serve does with
	// SLUICE_ADMIN_ADVERTISE.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { newRedis().NewRoster(announced.admin.Addr()).Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	roster := newRedis().NewRoster("")
	testenv.Until(t, 10*time.Second, "the peer's announcement", func() bool {
		got, _ := roster.Instances(context.Background())
		return slices.Contains(got, announced.admin.Addr())
	})

	f := newInstance(Options{Peers: []string{peer.admin.Addr(), "127.0.0.1:1"}, Directory: roster})
	// All three see the same traffic on their clocks, so their rates are
	// equal and the fleet's is three times one.
	for _, x := range []*fixture{f, peer, announced} {
		liveTraffic(t, x)
	}

	stop := make(chan struct{})
	wait := load(f, stop)
	dom := headless(t, bin, f.base+"/", "--dump-dom")
	img := screenshot(t, bin, f.base+"/", "live-under-load.png")
	close(stop)
	wait()

	for _, want := range []string{
		"shadow-mode denials/s",
		`class="shadow"`,
		"Errors and refused calls",
		"call refused: descriptors",
		"call invalid",
		"in process",
		"Fleet: 3 of 4 instances answering",
		"(this one)",
		peer.admin.Addr(),
		announced.admin.Addr(),
		"127.0.0.1:1",
		"not answering",
		"redis", // how the announced peer was found
		`href="/rlconfig"`, `href="/api/v1/status"`, `href="/api/v1/fleet"`, `href="/api/v1/top?by=denials&amp;window=1m"`,
		`href="/api/v1/counters"`, `href="/debug/pprof/"`, "gRPC reflection", `href="http://127.0.0.1:8080/metrics"`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if i := strings.Index(dom, `id="denied"`); i >= 0 {
		section := dom[i:]
		if j := strings.Index(section, "</section>"); j >= 0 {
			section = section[:j]
		}
		if strings.Contains(section, "trial") {
			t.Errorf("a shadow-mode descriptor is listed among the denied:\n%s", section)
		}
	}
	if amber := countColor(img, color.RGBA{0xd9, 0x77, 0x06, 0xff}); amber < 100 {
		t.Errorf("the shadow-mode line is not drawn: %d amber pixels", amber)
	}
	if pink := countColor(img, color.RGBA{0xfd, 0xec, 0xec, 0xff}); pink < 500 {
		t.Errorf("the down peer's row is not marked: %d pink pixels", pink)
	}

	// The fleet over JSON adds up the instances that answered.
	code, body := testenv.HTTPGet(t, f.base+"/api/v1/fleet")
	if code != 200 {
		t.Fatalf("/api/v1/fleet: %d %s", code, body)
	}
	var fl Fleet
	if err := json.Unmarshal([]byte(body), &fl); err != nil {
		t.Fatal(err)
	}
	if fl.Answered != 3 || fl.Failed != 1 || len(fl.Members) != 4 {
		t.Fatalf("fleet: %d answered, %d failed, %d members", fl.Answered, fl.Failed, len(fl.Members))
	}
	one := fl.Members[0].Status.Now
	if one.DecisionsPerSecond <= 0 || one.ShadowPerSecond <= 0 || one.ProblemsPerSecond <= 0 || fl.Total.DecisionsPerSecond < 3*one.DecisionsPerSecond-1e-9 {
		t.Errorf("fleet totals %+v, one instance %+v", fl.Total, one)
	}
}

// TestLivePageRedisStopped kills the Redis the service decides on and
// loads the live page: the backend is "not answering" with the error and
// how long the failed ping took (never "healthy" beside a ping time), and
// the calls that failed meanwhile are counted with their reasons: the
// failure_mode error domain's calls failed Unavailable, the failure_mode
// allow domain's descriptors answered OK without a limit.
func TestLivePageRedisStopped(t *testing.T) {
	bin := chromium(t)
	srv := redistest.Standalone(t)
	b, err := redis.New(context.Background(), redis.Options{URL: srv.Addr(), KeyPrefix: "stopped_", Timeout: 500 * time.Millisecond,
		Logger: stacktest.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	clock := testenv.NewClock(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))
	f := newFixtureConfig(t, clock, b, service.Options{}, liveConfig, Options{Info: Info{Backend: "redis single"}})
	for range 5 {
		f.call(t, "alice")
	}
	dom := headless(t, bin, f.base+"/", "--dump-dom")
	if !strings.Contains(dom, "answering</span>: a PING was answered in") {
		t.Errorf("with Redis up the backend is not answering:\n%s", section(dom, "backend"))
	}

	srv.Kill()
	for range 6 {
		if _, err := f.svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor("user", "bob"))); err == nil {
			t.Fatal("a failure_mode error domain answered with Redis down")
		}
		if _, err := f.svc.ShouldRateLimit(context.Background(), stacktest.Request("open", stacktest.Descriptor("user", "bob"))); err != nil {
			t.Fatalf("failure_mode allow: %v", err)
		}
	}
	clock.Advance(10 * time.Second) // the failures' bucket is now the last full one
	dom = headless(t, bin, f.base+"/", "--dump-dom")
	screenshot(t, bin, f.base+"/", "live-redis-stopped.png")
	backendSection := section(dom, "backend")
	for _, want := range []string{"not answering", "a PING failed after"} {
		if !strings.Contains(backendSection, want) {
			t.Errorf("the backend section lacks %q:\n%s", want, backendSection)
		}
	}
	if strings.Contains(backendSection, "healthy") || strings.Contains(backendSection, "was answered") {
		t.Errorf("the backend section contradicts itself:\n%s", backendSection)
	}
	problems := section(dom, "problems")
	for _, want := range []string{"call failed: Unavailable", "backend failed: failure_mode allow", "0.6/s", ">6<"} {
		if !strings.Contains(problems, want) {
			t.Errorf("the problems section lacks %q:\n%s", want, problems)
		}
	}
}

// section returns the rendered section whose id is id.
func section(dom, id string) string {
	i := strings.Index(dom, `id="`+id+`"`)
	if i < 0 {
		return ""
	}
	s := dom[i:]
	if j := strings.Index(s, "</section>"); j >= 0 {
		s = s[:j]
	}
	return s
}
