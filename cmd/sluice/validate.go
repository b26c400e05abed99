package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// validate loads the config at the given paths as serve would and prints
// every error as "file:line: reason" (exit 1), or the warnings and a
// summary (exit 0). With --strict, what serve would ignore with a warning
// is an error.
func validate(args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice validate", flag.ContinueOnError)
	merge := fs.Bool("merge-domain-config", false, "allow several files to define one domain (env MERGE_DOMAIN_CONFIG)")
	ignoreDots := fs.Bool("runtime-ignoredotfiles", true, "skip names starting with '.'; false reads them, as envoyproxy/ratelimit does by default (env RUNTIME_IGNOREDOTFILES)")
	strict := fs.Bool("strict", false, "refuse what the reference would ignore (keys where they mean nothing, keys written twice, later YAML documents) instead of warning")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice validate [flags] PATH...\n\nPATH is a config file or a directory: every regular file in it is read,\nwhatever its name, except names starting with '.' (unless\nRUNTIME_IGNOREDOTFILES=false).\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "sluice validate: %v\n", err)
		return exitUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env := envMap(environ)
	for _, b := range []struct {
		flag, env string
		p         *bool
	}{{"merge-domain-config", "MERGE_DOMAIN_CONFIG", merge}, {"runtime-ignoredotfiles", "RUNTIME_IGNOREDOTFILES", ignoreDots}} {
		v := env[b.env]
		if given[b.flag] || v == "" {
			continue
		}
		parsed, err := strconv.ParseBool(v)
		if err != nil {
			fmt.Fprintf(stderr, "sluice validate: invalid %s=%q: want true or false\n", b.env, v)
			return exitUsage
		}
		*b.p = parsed
	}
	if fs.NArg() == 0 {
		fs.SetOutput(stderr)
		fs.Usage()
		return exitUsage
	}
	cfg, err := descriptor.Load(descriptor.LoadOptions{MergeDomains: *merge, Strict: *strict, DotFiles: !*ignoreDots}, fs.Args()...)
	if err != nil {
		n := printConfigErrors(stdout, err)
		fmt.Fprintf(stderr, "sluice validate: %d %s\n", n, plural(n, "error", "errors"))
		return exitError
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stdout, "warning: "+w)
	}
	names := cfg.Domains()
	fmt.Fprintf(stdout, "%d %s OK", len(names), plural(len(names), "domain", "domains"))
	if len(names) > 0 {
		fmt.Fprintf(stdout, ": %s", strings.Join(names, ", "))
	}
	fmt.Fprintln(stdout)
	return exitOK
}

// printConfigErrors prints a config load error one "file:line: reason" per
// line and returns how many errors it held.
func printConfigErrors(w io.Writer, err error) int {
	var list descriptor.ErrorList
	if !errors.As(err, &list) {
		fmt.Fprintln(w, err)
		return 1
	}
	for _, e := range list {
		fmt.Fprintln(w, e.Error())
	}
	return len(list)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
