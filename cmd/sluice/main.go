// Command sluice is a global rate-limit service for Envoy: a drop-in
// replacement for envoyproxy/ratelimit with several rules per descriptor and
// more algorithms. Run `sluice help` for its commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
