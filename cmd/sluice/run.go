package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed: invalid config, unreachable server, ...
	exitUsage = 2 // bad flags, arguments or settings
)

const usage = `sluice is a global rate-limit service for Envoy (envoy.service.ratelimit.v3).

Usage:
  sluice serve [flags]            run the service (sluice serve --help lists the settings)
  sluice ratelimit [args]         serve as envoyproxy/ratelimit's /bin/ratelimit (the image's, which runs
                                  this): arguments serve does not define are ignored with a warning
  sluice validate [flags] PATH... check config files or directories; print every error as file:line: reason
  sluice check [flags]            send one ShouldRateLimit to a running server and print the answer
  sluice counters get|reset       look up or reset a descriptor's counters on the admin listener
  sluice version                  print the version
  sluice help                     print this help

Examples:
  sluice serve --config examples/config
  sluice validate /etc/ratelimit/config
  sluice check --addr 127.0.0.1:8081 --domain api --descriptor user=alice,path=/api/ocr
  sluice counters get --domain api --entry user=alice
  sluice counters reset --domain api --entry user=alice --rule per_user
`

// run is the whole program: it runs the command named by args[0] with the
// environment environ ("K=V" pairs) and returns the exit code. serve runs
// until ctx is done. Tests call it in-process.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, rest, environ, stdout, stderr)
	case "ratelimit":
		return serveAsIncumbent(ctx, rest, environ, stdout, stderr)
	case "validate":
		return validate(rest, environ, stdout, stderr)
	case "check":
		return check(ctx, rest, stdout, stderr)
	case "counters":
		return counters(ctx, rest, environ, stdout, stderr)
	case "version", "--version", "-version":
		v := readBuildVersion()
		fmt.Fprintf(stdout, "sluice %s %s %s/%s\n", v, v.GoVersion, runtime.GOOS, runtime.GOARCH)
		return exitOK
	case "help", "--help", "-help", "-h":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}
