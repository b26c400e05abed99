package reload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

func config(domain string, limit int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + strconv.Itoa(limit) + "}\n"
}

// harness is a Watcher over dir with the real descriptor loader, recording
// every configuration applied and every log line.
type harness struct {
	t       *testing.T
	dir     string
	w       *Watcher
	logs    *logtest.Hook
	mu      sync.Mutex
	applied []*descriptor.Config
}

func newHarness(t *testing.T, dir string, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, dir: dir}
	logger, hook := logtest.NewNullLogger()
	logger.SetOutput(io.Discard)
	h.logs = hook
	opts.Paths = []string{dir}
	opts.Load = func() (*descriptor.Config, error) { return descriptor.Load(descriptor.LoadOptions{}, dir) }
	opts.Apply = func(c *descriptor.Config) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.applied = append(h.applied, c)
	}
	opts.Logger = logger
	opts.Now = func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) }
	w, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	return h
}

// loadedHarness is newHarness with default options after a first Load,
// which must succeed.
func loadedHarness(t *testing.T, dir string) *harness {
	t.Helper()
	h := newHarness(t, dir, Options{})
	if err := h.w.Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return h
}

// limitOf returns the limit of k=v in domain d of the configuration in use.
func (h *harness) limitOf(d string) uint64 {
	h.t.Helper()
	n := h.w.Config().Domain(d).Match([]descriptor.Entry{{Key: "k", Value: "v"}})
	if n == nil || len(n.Rules) != 1 {
		h.t.Fatalf("domain %s: k=v matches %+v", d, n)
	}
	return n.Rules[0].Limit
}

func (h *harness) check(wantReloaded, wantErr bool) {
	h.t.Helper()
	reloaded, err := h.w.Check()
	if reloaded != wantReloaded || (err != nil) != wantErr {
		h.t.Fatalf("Check() = %v, %v; want reloaded %v, error %v", reloaded, err, wantReloaded, wantErr)
	}
}

func (h *harness) lastInfo() string {
	for i := len(h.logs.AllEntries()) - 1; i >= 0; i-- {
		if e := h.logs.AllEntries()[i]; e.Level == logrus.InfoLevel {
			return e.Message
		}
	}
	return ""
}

func TestWatcherReloads(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api.yaml", config("api", 10))
	writeFile(t, dir, "web.yaml", config("web", 5))
	h := loadedHarness(t, dir)
	if got := h.limitOf("api"); got != 10 {
		t.Fatalf("api limit %d, want 10", got)
	}
	h.check(false, false)

	// A changed limit applies.
	writeFile(t, dir, "api.yaml", config("api", 20))
	h.check(true, false)
	if got := h.limitOf("api"); got != 20 {
		t.Errorf("api limit after reload %d, want 20", got)
	}
	if got, want := h.lastInfo(), "config reloaded: changed [api]"; got != want {
		t.Errorf("log %q, want %q", got, want)
	}

	// A broken file is rejected: the last good config stays, the failure is
	// counted and logged with file and line, once.
	writeFile(t, dir, "api.yaml", config("api", 30)+"    bogus: 1\n")
	h.check(true, true)
	if got := h.limitOf("api"); got != 20 {
		t.Errorf("api limit after a broken reload %d, want 20 (kept)", got)
	}
	st := h.w.Stats()
	if st.Successes != 2 || st.Failures != 1 || st.LastError == nil {
		t.Errorf("stats %+v, want 2 successes, 1 failure and an error", st)
	}
	var list descriptor.ErrorList
	if !errors.As(st.LastError, &list) || len(list) == 0 || list[0].Line == 0 {
		t.Errorf("LastError %v: want a descriptor.ErrorList with lines", st.LastError)
	}
	var logged bool
	for _, e := range h.logs.AllEntries() {
		if e.Level == logrus.ErrorLevel && strings.Contains(e.Message, filepath.Join(dir, "api.yaml")+":") {
			logged = true
		}
	}
	if !logged {
		t.Error("no error line naming api.yaml:<line>")
	}
	h.check(false, false) // the same broken file is not retried or recounted
	if got := h.w.Stats().Failures; got != 1 {
		t.Errorf("failures after an idle check %d, want 1", got)
	}

	// Fixing it applies, and clears the last error.
	writeFile(t, dir, "api.yaml", config("api", 30))
	h.check(true, false)
	if got := h.limitOf("api"); got != 30 {
		t.Errorf("api limit after the fix %d, want 30", got)
	}
	if st := h.w.Stats(); st.LastError != nil || st.Successes != 3 || st.Domains != 2 {
		t.Errorf("stats after the fix %+v", st)
	}

	// Domains added and removed are named.
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "new.yaml", config("new", 1))
	h.check(true, false)
	if got, want := h.lastInfo(), "config reloaded: added [new]; removed [web]"; got != want {
		t.Errorf("log %q, want %q", got, want)
	}

	// A comment changes the file but not the config.
	writeFile(t, dir, "new.yaml", "# a comment\n"+config("new", 1))
	h.check(true, false)
	if got, want := h.lastInfo(), "config reloaded: no domain changed"; got != want {
		t.Errorf("log %q, want %q", got, want)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.applied) != 5 {
		t.Errorf("Apply called %d times, want 5 (never for the broken file)", len(h.applied))
	}
}

func TestWatcherKubernetesSwap(t *testing.T) {
	dir := t.TempDir()
	kubeDir(t, dir, "..2026_01_01", map[string]string{"api.yaml": config("api", 10)})
	symlink(t, "..2026_01_01", filepath.Join(dir, "..data"))
	h := loadedHarness(t, dir)
	if got := h.limitOf("api"); got != 10 {
		t.Fatalf("api limit %d, want 10", got)
	}
	kubeSwap(t, dir, "..2026_01_01", "..2026_01_02", map[string]string{"api.yaml": config("api", 11)})
	h.check(true, false)
	if got := h.limitOf("api"); got != 11 {
		t.Errorf("api limit after the ..data swap %d, want 11", got)
	}
}

func TestWatcherDirectoryVanishes(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	writeFile(t, dir, "api.yaml", config("api", 10))
	h := loadedHarness(t, dir)
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	h.check(true, true)
	h.check(false, false)
	if got := h.limitOf("api"); got != 10 {
		t.Errorf("api limit with the directory gone %d, want 10 (kept)", got)
	}
	if err := os.Rename(dir+".old", dir); err != nil {
		t.Fatal(err)
	}
	h.check(true, false)
}

func TestWatcherInitialLoadError(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api.yaml", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	h := newHarness(t, dir, Options{})
	err := h.w.Load()
	if err == nil || !strings.Contains(err.Error(), "api.yaml:4:") {
		t.Fatalf("Load error %v, want one at api.yaml:4", err)
	}
	if h.w.Config() != nil || h.w.Stats().Failures != 1 {
		t.Errorf("after a failed first load: config %v, stats %+v", h.w.Config(), h.w.Stats())
	}
}

func TestWatcherRun(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api.yaml", config("api", 10))
	ticks := make(chan time.Time)
	stopped := make(chan struct{})
	var interval time.Duration
	h := newHarness(t, dir, Options{
		Interval: 250 * time.Millisecond,
		NewTicker: func(d time.Duration) (<-chan time.Time, func()) {
			interval = d
			return ticks, func() { close(stopped) }
		},
	})
	if err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		h.w.Run(ctx)
		close(done)
	}()

	writeFile(t, dir, "api.yaml", config("api", 12))
	ticks <- time.Time{} // received: Run is in its loop
	ticks <- time.Time{} // received: the first tick's Check has finished
	if got := h.limitOf("api"); got != 12 {
		t.Errorf("api limit after a tick %d, want 12", got)
	}
	if interval != 250*time.Millisecond {
		t.Errorf("ticker interval %v, want 250ms", interval)
	}
	cancel()
	<-done
	select {
	case <-stopped:
	default:
		t.Error("Run returned without stopping its ticker")
	}
}

func TestNewValidates(t *testing.T) {
	load := func() (*descriptor.Config, error) { return nil, nil }
	apply := func(*descriptor.Config) {}
	tests := []struct {
		name string
		opts Options
	}{
		{"no paths", Options{Load: load, Apply: apply}},
		{"no load", Options{Paths: []string{"."}, Apply: apply}},
		{"no apply", Options{Paths: []string{"."}, Load: load}},
		{"negative interval", Options{Paths: []string{"."}, Load: load, Apply: apply, Interval: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts); err == nil {
				t.Error("New: no error")
			}
		})
	}
}

// TestWatcherRefusesEmptyReload is the regression test for a reload that
// emptied the config (a non-atomic deploy leaves the directory empty for
// one poll): it removed every limit and logged it at info. It is refused,
// logged as an error, and the last good config stays; with AllowEmpty it
// applies, with a warning.
func TestWatcherRefusesEmptyReload(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("AllowEmpty=%v", allow), func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "api.yaml", config("api", 10))
			var refused []error
			h := newHarness(t, dir, Options{AllowEmpty: allow, Refused: func(err error) { refused = append(refused, err) }})
			if err := h.w.Load(); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "api.yaml")); err != nil {
				t.Fatal(err)
			}
			reloaded, err := h.w.Check()
			if !reloaded {
				t.Fatal("Check did not reload")
			}
			var levels []logrus.Level
			for _, e := range h.logs.AllEntries() {
				levels = append(levels, e.Level)
			}
			if allow {
				if err != nil || len(h.w.Config().Domains()) != 0 {
					t.Fatalf("AllowEmpty: err %v, domains %v; want the empty config applied", err, h.w.Config().Domains())
				}
				if e := h.logs.LastEntry(); e == nil || e.Level != logrus.WarnLevel || !strings.Contains(e.Message, "every limit is removed") {
					t.Errorf("last log %+v, want a warning that every limit is removed", e)
				}
				return
			}
			if !errors.Is(err, ErrEmptyReload) || !strings.Contains(err.Error(), "SLUICE_ALLOW_EMPTY_RELOAD") {
				t.Fatalf("Check error %v, want ErrEmptyReload naming the setting", err)
			}
			if len(refused) != 1 || refused[0] != err {
				t.Errorf("Refused called with %v, want once with the error", refused)
			}
			if got := h.limitOf("api"); got != 10 {
				t.Errorf("api limit %d, want 10 (kept)", got)
			}
			if !slices.Contains(levels, logrus.ErrorLevel) || slices.Contains(levels, logrus.InfoLevel) {
				t.Errorf("log levels %v, want an error and no info line", levels)
			}
			// The files come back: an ordinary reload.
			writeFile(t, dir, "api.yaml", config("api", 12))
			h.check(true, false)
			if got := h.limitOf("api"); got != 12 {
				t.Errorf("api limit %d, want 12", got)
			}
		})
	}
}

// TestWatcherSurvivesAliasBomb: a padded alias bomb written into the
// watched directory is refused and the server keeps its config (it used
// to pass the expansion guard and exhaust memory on reload).
func TestWatcherSurvivesAliasBomb(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api.yaml", config("api", 10))
	h := loadedHarness(t, dir)
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - key: a\n    metadata:\n      pad: [x" + strings.Repeat(",x", 199_999) + "]\n")
	b.WriteString("      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 6; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	writeFile(t, dir, "bomb.yaml", b.String())
	reloaded, err := h.w.Check()
	if !reloaded || err == nil || !strings.Contains(err.Error(), "aliases expand this document") {
		t.Fatalf("Check() = %v, %v; want the bomb refused", reloaded, err)
	}
	if got := h.limitOf("api"); got != 10 || h.w.Config().Domain("bomb") != nil {
		t.Errorf("config after the bomb: api %d, bomb %v; want the last good one", got, h.w.Config().Domain("bomb"))
	}
}

// TestWatcherLoadPanics: a panic while loading is a failed reload, not a
// crash.
func TestWatcherLoadPanics(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api.yaml", config("api", 10))
	h := loadedHarness(t, dir)
	h.w.opts.Load = func() (*descriptor.Config, error) { panic("boom") }
	writeFile(t, dir, "api.yaml", config("api", 20))
	reloaded, err := h.w.Check()
	if !reloaded || err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("Check() = %v, %v; want the panic as an error", reloaded, err)
	}
	if got := h.limitOf("api"); got != 10 {
		t.Errorf("api limit %d, want 10 (kept)", got)
	}
}

// TestStatsDoNotWaitForLoad: while a load is blocked (a slow disk, a
// stalled mount), Stats and Config answer at once with what the last
// finished load left, and see the new load once it finishes. Before, they
// took the lock the load held, so the admin status endpoint hung for as
// long as the load. Run with -race.
func TestStatsDoNotWaitForLoad(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", config("a", 1))
	entered, release := make(chan struct{}), make(chan struct{})
	var blocking bool
	h := newHarness(t, dir, Options{})
	load := h.w.opts.Load
	h.w.opts.Load = func() (*descriptor.Config, error) {
		if blocking {
			entered <- struct{}{}
			<-release
		}
		return load()
	}
	if err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	first := h.w.Config()
	blocking = true // the first load has finished: no load reads it concurrently
	done := make(chan error)
	go func() { done <- h.w.Load() }()
	<-entered

	answered := make(chan Stats)
	go func() {
		h.w.Config()
		answered <- h.w.Stats()
	}()
	select {
	case st := <-answered:
		if st.Successes != 1 || h.w.Config() != first {
			t.Errorf("during the load: %+v, config changed %v; want the first load's", st, h.w.Config() != first)
		}
	case <-time.After(30 * time.Second): // a deadline for a hang, not a wait
		close(release)
		t.Fatal("Stats waited for the load in progress")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := h.w.Stats(); st.Successes != 2 || h.w.Config() == first {
		t.Errorf("after the load: %+v, config replaced %v; want 2 successes and a new config", st, h.w.Config() != first)
	}
}
