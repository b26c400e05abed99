package descriptor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LoadOptions controls Load.
type LoadOptions struct {
	// MergeDomains allows several files (or documents) to define the same
	// domain: their top-level descriptors are joined into one tree, in load
	// order. Colliding composite keys are still errors. This is the
	// reference's MERGE_DOMAIN_CONFIG. When false, a domain defined twice
	// is an error.
	MergeDomains bool
}

// Load reads every config file named by paths and compiles them into one
// Config.
//
// A path naming a file is read whatever its name. A directory is walked
// recursively in name order, reading the files whose names end in .yaml or
// .yml (any case), skipping names that start with '.' (so a Kubernetes
// ConfigMap's "..data" and "..2024_..." directories are not read twice),
// and following symbolic links to files and directories (Kubernetes mounts
// each file as a link into "..data"). A file reached twice is read once.
//
// On error Load returns a nil Config and an ErrorList holding every error
// of every file. No paths, or only empty directories, give an empty Config.
func Load(opts LoadOptions, paths ...string) (*Config, error) {
	w := &walker{seen: make(map[string]bool)}
	for _, p := range paths {
		w.visit(p, true, nil)
	}
	errs := w.errs
	byName := make(map[string]*Domain)
	var order []*Domain
	for _, f := range w.files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, &Error{File: f, Reason: fmt.Sprintf("cannot read: %v", err)})
			continue
		}
		domains, err := Parse(f, data)
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
	return newConfig(order), nil
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

// walker collects the files Load reads.
type walker struct {
	files []string
	seen  map[string]bool // real paths of files already listed
	errs  ErrorList
}

// isConfigName reports whether a file found in a directory is read.
func isConfigName(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// visit lists path: a file (read when explicit, or when its name is a
// config name), or a directory to walk. stack holds the directories being
// walked, to stop symbolic-link loops.
func (w *walker) visit(path string, explicit bool, stack []os.FileInfo) {
	fi, err := os.Stat(path) // follows symbolic links
	if err != nil {
		w.errs = append(w.errs, &Error{File: path, Reason: fmt.Sprintf("cannot read: %v", err)})
		return
	}
	if !fi.IsDir() {
		if !explicit && (!fi.Mode().IsRegular() || !isConfigName(path)) {
			return
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			real = path
		}
		if abs, err := filepath.Abs(real); err == nil {
			real = abs
		}
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
	entries, err := os.ReadDir(path)
	if err != nil {
		w.errs = append(w.errs, &Error{File: path, Reason: fmt.Sprintf("cannot read directory: %v", err)})
		return
	}
	stack = append(stack, fi)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		w.visit(filepath.Join(path, e.Name()), false, stack)
	}
}
