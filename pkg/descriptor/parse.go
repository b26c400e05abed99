package descriptor

// Parse compiles one config file: a YAML document holding one domain, as
// the reference reads it (see ReadYAML: what the reference ignores is
// ignored with a warning, kept in Config.Warnings). name is used in errors
// only. It is ReadYAML followed by Compile.
//
// On error Parse returns an ErrorList of every error it found, along with
// the domains it could build (partial: for diagnostics, not for serving).
// Domains of the same name are not checked here; Load and NewConfig do.
func Parse(name string, data []byte) ([]*Domain, error) {
	return parse(name, data, ReadOptions{})
}

// parse is Parse with options.
func parse(name string, data []byte, opts ReadOptions) ([]*Domain, error) {
	specs, err := ReadYAML(name, data, opts)
	errs, _ := err.(ErrorList)
	var domains []*Domain
	for _, s := range specs {
		d, err := Compile(s)
		if l, ok := err.(ErrorList); ok {
			errs = append(errs, l...)
		}
		if d != nil {
			domains = append(domains, d)
		}
	}
	sortErrors(errs)
	errs = compactErrors(errs)
	return domains, errs.err()
}
