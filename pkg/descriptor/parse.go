package descriptor

// Parse compiles one config file: a YAML document holding one domain, as
// the reference reads, or a stream of documents ("---" between them), each
// one domain. name is used in errors only. It is ReadYAML followed by
// Compile for each domain.
//
// On error Parse returns an ErrorList of every error it found, along with
// the domains it could build (partial: for diagnostics, not for serving).
// Domains of the same name are not checked here; Load and NewConfig do.
func Parse(name string, data []byte) ([]*Domain, error) {
	specs, err := ReadYAML(name, data)
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
