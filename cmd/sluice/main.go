// Command sluice is a global rate-limit service for Envoy: a drop-in
// replacement for envoyproxy/ratelimit with several rules per descriptor and
// more algorithms. Run `sluice help` for its commands.
package main

import (
	"context"
	"os"
	"path/filepath"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go stopOnSignals(notifyShutdown(), cancel, os.Stderr)
	os.Exit(run(ctx, commandArgs(os.Args[0], os.Args[1:]), os.Environ(), os.Stdout, os.Stderr))
}

// commandArgs returns the arguments run gets. Run under the incumbent's
// name, `ratelimit` (the image's /bin/ratelimit, which Envoy Gateway's
// Deployment runs with no argument, and Envoy AI Gateway's with its own),
// the binary is `sluice ratelimit`: serve, ignoring the arguments it does
// not define, as the incumbent ignores every argument.
func commandArgs(argv0 string, args []string) []string {
	if filepath.Base(argv0) == "ratelimit" {
		return append([]string{"ratelimit"}, args...)
	}
	return args
}
