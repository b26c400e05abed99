package descriptor

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// LoadOptions controls Load. The zero LoadOptions reads as the reference
// does by default: a domain defined twice is an error, and what the
// reference ignores is a warning.
type LoadOptions struct {
	// MergeDomains allows several files (or documents) to define the same
	// domain: their top-level descriptors are joined into one tree, in load
	// order. Colliding composite keys are still errors. This is the
	// reference's MERGE_DOMAIN_CONFIG. When false, a domain defined twice
	// is an error.
	MergeDomains bool
	// Strict makes an error of everything the reference reads and ignores
	// (ReadOptions.Strict), for checks that want a config exactly as
	// written.
	Strict bool
	// DotFiles reads the entries of a directory whose name starts with
	// '.', as the reference does unless RUNTIME_IGNOREDOTFILES=true, except
	// the Kubernetes atomic writer's own ('..data', '..<timestamp>'),
	// whose files are read through the links beside them. By default they
	// are skipped, each named in Config.Warnings.
	DotFiles bool
}

// Load reads every config file named by paths and compiles them into one
// Config.
//
// A path naming a regular file is read whatever its name; a path naming
// neither a regular file nor a directory (a named pipe, a socket, a device)
// is an error, never read: reading a named pipe blocks. A directory is walked
// recursively in name order and every regular file in it is read, as the
// reference reads its runtime directory, whatever its extension. Names
// starting with '.' are skipped: Kubernetes' ConfigMap internals ("..data"
// and "..2024_..." directories, whose files are reached through the
// symbolic links the mount makes) silently, any other with a warning.
// Symbolic links to files and directories are followed. A file reached
// twice is read once, and a directory reached twice is walked once, so
// links that share directories cost no more than the directories hold. Anything found but not read (a dot-file, a socket, a
// device) is named in Config.Warnings, never skipped in silence.
//
// On error Load returns a nil Config and an ErrorList holding every error
// of every file. No paths, or only empty directories, give an empty Config.
func Load(opts LoadOptions, paths ...string) (*Config, error) {
	w := &walker{seen: make(map[string]bool), walked: make(map[string]bool), dotFiles: opts.DotFiles}
	for _, p := range paths {
		w.visit(p, true, nil)
	}
	errs := w.errs
	byName := make(map[string]*Domain)
	var order []*Domain
	for _, f := range w.files {
		data, err := readFile(f)
		if err != nil {
			errs = append(errs, &Error{File: f, Reason: err.Error()})
			continue
		}
		domains, err := parse(f, data, ReadOptions{Strict: opts.Strict})
		if l, ok := err.(ErrorList); ok {
			errs = append(errs, l...)
		}
		for _, d := range domains {
			first := byName[d.Name]
			switch {
			case first == nil:
				byName[d.Name] = d
				order = append(order, d)
			case opts.MergeDomains:
				errs = append(errs, merge(first, d)...)
			default:
				errs = append(errs, duplicateDomain(d, first))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c := newConfig(order)
	c.loadWarnings = w.skipped
	return c, nil
}

// MaxFileSize is the largest config file Load reads, in bytes: far above
// any real config (a thousand descriptors take about 100 KiB), and small
// enough that reading and parsing one stays cheap. A larger file is an
// error, never read in part.
const MaxFileSize = 4 << 20

// readFile reads a regular config file of at most MaxFileSize bytes. It
// opens without blocking and refuses anything else, so a file that became
// a named pipe since the walk saw it cannot block the load.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file or a directory (%s): a config path must name one", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("file is larger than %d bytes (%s), the most a config file may hold", MaxFileSize, byteSize(MaxFileSize))
	}
	return data, nil
}

// NewConfig builds a Config of the given domains, as Parse returns them.
// Two domains with the same name are an error (an ErrorList); use Load with
// MergeDomains to join them.
func NewConfig(domains ...*Domain) (*Config, error) {
	var errs ErrorList
	byName := make(map[string]*Domain, len(domains))
	var order []*Domain
	for _, d := range domains {
		if first := byName[d.Name]; first != nil {
			errs = append(errs, duplicateDomain(d, first))
			continue
		}
		byName[d.Name] = d
		order = append(order, d)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return newConfig(order), nil
}

func newConfig(domains []*Domain) *Config {
	c := &Config{domains: make(map[string]*Domain, len(domains))}
	for _, d := range domains {
		c.domains[d.Name] = d
		c.names = append(c.names, d.Name)
	}
	slices.Sort(c.names)
	return c
}

func duplicateDomain(d, first *Domain) *Error {
	return &Error{File: d.File, Line: d.line,
		Reason: fmt.Sprintf("duplicate domain '%s' in config file (first in %s)", d.Name, where(first.File, first.line))}
}

// where formats a location for a reason text.
func where(file string, line int) string {
	if line > 0 {
		return fmt.Sprintf("%s:%d", file, line)
	}
	return file
}

// merge joins src's top-level descriptors into dst (MergeDomains).
func merge(dst, src *Domain) ErrorList {
	var errs ErrorList
	dst.warnings = append(dst.warnings, src.warnings...)
	dst.depth = max(dst.depth, src.depth)
	for _, n := range src.root.nodes {
		if first := dst.root.insert(n); first != nil {
			errs = append(errs, &Error{File: n.File, Line: n.Line,
				Reason: fmt.Sprintf("duplicate descriptor composite key '%s.%s' (first at %s)", dst.Name, n.Path(), where(first.File, first.Line))})
		}
	}
	switch {
	case !src.failureModeSet:
	case !dst.failureModeSet:
		dst.FailureMode, dst.failureModeSet, dst.failureModeAt = src.FailureMode, true, src.failureModeAt
	case src.FailureMode != dst.FailureMode:
		errs = append(errs, src.failureModeAt.error(fmt.Sprintf("failure_mode %s of domain '%s' conflicts with failure_mode %s set in %s", src.FailureMode, src.Name, dst.FailureMode, dst.failureModeAt.Source)))
	}
	return errs
}

// MaxDirectoryDepth bounds how deep Load walks a config directory: a
// directory MaxDirectoryDepth levels below a path given to Load is an
// error, not read. The reload watcher looks no deeper for changes, so a
// file below it would be loaded once and never again.
const MaxDirectoryDepth = 32

// walker collects the files Load reads.
type walker struct {
	files   []string
	seen    map[string]bool // real paths of files already listed
	walked  map[string]bool // real paths of directories already walked
	errs    ErrorList
	skipped []string // what was found but not read, and why
	// dotFiles reads names starting with '.' (LoadOptions.DotFiles).
	dotFiles bool
}

// realPath returns path with symbolic links resolved, made absolute; path
// itself when it cannot be resolved.
func realPath(path string) string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	if abs, err := filepath.Abs(real); err == nil {
		real = abs
	}
	return real
}

// isKubernetesInternal reports whether a directory entry is one of the
// atomic writer's own ("..data", "..2024_01_02_15_04_05.123"): their files
// are reached through the symbolic links next to them.
func isKubernetesInternal(name string) bool {
	return strings.HasPrefix(name, "..")
}

// visit lists path: a regular file, or a directory to walk. Anything else
// is an error when explicit (a path given to Load) and skipped with a
// warning in a directory. stack holds the directories being walked,
// to stop symbolic-link loops.
func (w *walker) visit(path string, explicit bool, stack []os.FileInfo) {
	fi, err := os.Stat(path) // follows symbolic links
	if err != nil {
		w.errs = append(w.errs, &Error{File: path, Reason: fmt.Sprintf("cannot read: %v", err)})
		return
	}
	if !fi.IsDir() {
		switch {
		case fi.Mode().IsRegular():
		case explicit:
			// Reading a named pipe blocks until a writer comes, maybe
			// forever; a device may never end.
			w.errs = append(w.errs, &Error{File: path, Reason: fmt.Sprintf("not a regular file or a directory (%s): a config path must name one", fi.Mode().Type())})
			return
		default:
			w.skipped = append(w.skipped, fmt.Sprintf("%s: not read: not a regular file (%s)", path, fi.Mode().Type()))
			return
		}
		real := realPath(path)
		if !w.seen[real] {
			w.seen[real] = true
			w.files = append(w.files, path)
		}
		return
	}
	for _, up := range stack {
		if os.SameFile(up, fi) {
			w.errs = append(w.errs, &Error{File: path, Reason: "symbolic link loop: directory is its own ancestor"})
			return
		}
	}
	if len(stack) >= MaxDirectoryDepth {
		w.errs = append(w.errs, &Error{File: path, Reason: fmt.Sprintf("directory nested %d levels below the config path, more than the %d that are read and watched", len(stack), MaxDirectoryDepth-1)})
		return
	}
	// Every file under a directory walked already is listed: walking it
	// again through another link would list nothing new, and links that
	// each reach a shared directory twice would double the walk per level.
	real := realPath(path)
	if w.walked[real] {
		return
	}
	w.walked[real] = true
	entries, err := os.ReadDir(path)
	if err != nil {
		w.errs = append(w.errs, &Error{File: path, Reason: fmt.Sprintf("cannot read directory: %v", err)})
		return
	}
	stack = append(stack, fi)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") && (!w.dotFiles || isKubernetesInternal(name)) {
			if !isKubernetesInternal(name) {
				w.skipped = append(w.skipped, fmt.Sprintf("%s: not read: names starting with '.' are skipped", filepath.Join(path, name)))
			}
			continue
		}
		w.visit(filepath.Join(path, name), false, stack)
	}
}
