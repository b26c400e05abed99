package reload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// DefaultInterval is how often a Watcher polls when Options.Interval is 0.
const DefaultInterval = time.Second

// Options configure a Watcher. Paths, Load and Apply are required.
type Options struct {
	// Paths are the files and directories to watch: the ones Load reads.
	Paths []string
	// DotFiles makes the poll see entries whose name starts with '.'
	// (FingerprintOptions.DotFiles): set it when Load reads them.
	DotFiles bool
	// Interval is the polling period; 0 means DefaultInterval.
	Interval time.Duration
	// Load reads and validates the configuration from Paths. It must not
	// change anything in use: the Watcher calls Apply only on success.
	Load func() (*descriptor.Config, error)
	// Apply puts a successfully loaded configuration in use.
	Apply func(*descriptor.Config)
	// AllowEmpty lets a reload apply a configuration with no domain while
	// the one in use has some. By default such a reload is refused (and
	// logged as an error): a deploy that empties the directory for one
	// poll, or a mount that vanished, would otherwise remove every limit.
	// The first load may always be empty.
	AllowEmpty bool
	// Refused, when set, is called with the error of every load the
	// Watcher refuses although Load returned no error (an empty reload,
	// a panic inside Load), so that a caller counting Load's errors can
	// count these too.
	Refused func(error)
	// Logger receives one info line per successful reload and one error
	// line per configuration error. Nil means logrus' standard logger.
	Logger logrus.FieldLogger
	// Now is the clock for Stats; nil means time.Now.
	Now func() time.Time
	// NewTicker starts the ticker Run waits on and returns its channel and
	// a stop function; nil means a time.Ticker. Tests that drive Run pass a
	// channel of their own.
	NewTicker func(time.Duration) (<-chan time.Time, func())
}

// ErrEmptyReload is the error of a reload refused because the new
// configuration has no domain (Options.AllowEmpty).
var ErrEmptyReload = errors.New("reload: the new configuration has no domain")

// Stats counts the Watcher's loads, for logs and metrics.
type Stats struct {
	// Successes and Failures count loads (the first one included) that
	// applied a configuration and that were rejected.
	Successes, Failures uint64
	// LastError is the error of the last failed load, or nil when the last
	// load succeeded.
	LastError error
	// LastSuccess and LastFailure are when the last load of each kind
	// happened; zero if none has.
	LastSuccess, LastFailure time.Time
	// Domains is how many domains the configuration in use holds.
	Domains int
}

// Watcher reloads the configuration when its paths change. Its methods are
// safe for concurrent use; loads never run concurrently, and Stats and
// Config never wait for a load in progress (they answer what the last
// finished load left).
type Watcher struct {
	opts Options
	log  logrus.FieldLogger

	// mu serializes loads; it is held for a whole load, Apply included.
	mu          sync.Mutex
	fingerprint string

	// stateMu guards current and stats for readers. They are written
	// under mu and stateMu, so a load reads them under mu alone.
	stateMu sync.Mutex
	current *descriptor.Config
	stats   Stats
}

// New returns a Watcher. It loads nothing: call Load for the first
// configuration, then Run (or Check) for the changes.
func New(o Options) (*Watcher, error) {
	switch {
	case len(o.Paths) == 0:
		return nil, errors.New("reload: no paths to watch")
	case o.Load == nil:
		return nil, errors.New("reload: Options.Load is nil")
	case o.Apply == nil:
		return nil, errors.New("reload: Options.Apply is nil")
	case o.Interval < 0:
		return nil, fmt.Errorf("reload: negative interval %v", o.Interval)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewTicker == nil {
		o.NewTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	w := &Watcher{opts: o, log: o.Logger}
	if w.log == nil {
		w.log = logrus.StandardLogger()
	}
	return w, nil
}

// Load loads the configuration whatever the paths' fingerprint, applies it
// on success and returns the load error otherwise (counted in Stats, and not
// logged: at start the caller reports it). Use it for the first load.
func (w *Watcher) Load() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fingerprint = w.fingerprintNow()
	return w.loadLocked()
}

// Check reloads the configuration if the paths' fingerprint changed since
// the last load. It reports whether it loaded, and the load error if the
// new configuration was rejected (the previous one then stays in use).
// Errors are also logged. Run calls Check every interval; tests call it
// directly.
func (w *Watcher) Check() (reloaded bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fp := w.fingerprintNow()
	if fp == w.fingerprint {
		return false, nil
	}
	// Remember the new fingerprint even if the load fails: a broken file is
	// reported once, not on every tick, and the next edit is tried again.
	w.fingerprint = fp
	old := w.current
	if err := w.loadLocked(); err != nil {
		w.logFailure(err)
		return true, err
	}
	w.logSuccess(old, w.current)
	return true, nil
}

// Run calls Check every interval until ctx is done, then returns.
func (w *Watcher) Run(ctx context.Context) {
	tick, stop := w.opts.NewTicker(w.opts.Interval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			w.Check() // errors are logged and counted by Check
		}
	}
}

// Stats returns the load counters as the last finished load left them; it
// does not wait for a load in progress.
func (w *Watcher) Stats() Stats {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	return w.stats
}

// Config returns the configuration in use: the last one applied, or nil
// before the first successful load. It does not wait for a load in
// progress.
func (w *Watcher) Config() *descriptor.Config {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	return w.current
}

// fingerprintNow returns the paths' fingerprint, or a value naming the
// error when they cannot be read: a vanished directory is then a change
// (whose load fails and is reported), and its reappearance another.
func (w *Watcher) fingerprintNow() string {
	fp, err := FingerprintWith(FingerprintOptions{DotFiles: w.opts.DotFiles}, w.opts.Paths...)
	if err != nil {
		return "error: " + err.Error()
	}
	return fp
}

// loadLocked loads, applies on success and counts the load. The caller
// holds w.mu.
func (w *Watcher) loadLocked() error {
	cfg, panicked, err := w.loadSafely()
	now := w.opts.Now()
	refused := panicked
	if err == nil && cfg == nil {
		err, refused = errors.New("reload: Load returned no configuration and no error"), true
	}
	if err == nil && w.current != nil && !w.opts.AllowEmpty && len(cfg.Domains()) == 0 && len(w.current.Domains()) > 0 {
		err = fmt.Errorf("%w: it would remove every limit of the %d domains in use (%s); if that is meant, allow empty reloads (SLUICE_ALLOW_EMPTY_RELOAD=true)",
			ErrEmptyReload, len(w.current.Domains()), strings.Join(w.current.Domains(), ", "))
		refused = true
	}
	if refused && w.opts.Refused != nil {
		w.opts.Refused(err)
	}
	if err != nil {
		w.stateMu.Lock()
		defer w.stateMu.Unlock()
		w.stats.Failures++
		w.stats.LastError = err
		w.stats.LastFailure = now
		return err
	}
	w.opts.Apply(cfg)
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	w.current = cfg
	w.stats.Successes++
	w.stats.LastError = nil
	w.stats.LastSuccess = now
	w.stats.Domains = len(cfg.Domains())
	return nil
}

// loadSafely calls Options.Load, turning a panic into an error: whatever a
// config file holds, a reload never takes the server down.
func (w *Watcher) loadSafely() (cfg *descriptor.Config, panicked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg, panicked, err = nil, true, fmt.Errorf("reload: loading the configuration panicked: %v", r)
		}
	}()
	cfg, err = w.opts.Load()
	return cfg, false, err
}

func (w *Watcher) logFailure(err error) {
	// A descriptor.ErrorList prints one "file:line: reason" per line: log
	// each on its own line so none is lost in a multi-line message.
	for _, line := range strings.Split(err.Error(), "\n") {
		w.log.Error("config: " + line)
	}
	w.log.WithField("failures", w.stats.Failures).
		Warn("config reload rejected; keeping the last good configuration")
}

func (w *Watcher) logSuccess(old, cur *descriptor.Config) {
	d := Diff(old, cur)
	if len(cur.Domains()) == 0 && len(old.Domains()) > 0 {
		w.log.WithField("removed", d.Removed).
			Warn("config reloaded with no domain: every limit is removed and every request is answered OK")
		return
	}
	w.log.WithFields(logrus.Fields{
		"domains": len(cur.Domains()),
		"added":   d.Added,
		"removed": d.Removed,
		"changed": d.Changed,
	}).Info("config reloaded: " + d.String())
}
