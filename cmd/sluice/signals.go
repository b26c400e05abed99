package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// shutdownSignals are the signals that stop sluice gracefully: SIGTERM,
// SIGINT and, as the reference does, SIGHUP, unless the process was
// started with SIGHUP ignored (nohup), which then stays ignored.
func shutdownSignals() []os.Signal {
	sigs := []os.Signal{syscall.SIGTERM, os.Interrupt}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// notifyShutdown relays the shutdown signals to the channel it returns,
// from now on: call it before anything that a signal must stop gracefully.
func notifyShutdown() <-chan os.Signal {
	c := make(chan os.Signal, 2)
	signal.Notify(c, shutdownSignals()...)
	return c
}

// stopOnSignals calls stop at the first signal on c, which starts the
// graceful shutdown (drain delay, in-flight calls), and on a second one,
// during that shutdown, says so on stderr and exits at once with
// exitError: an operator who presses Ctrl-C twice is not kept waiting.
func stopOnSignals(c <-chan os.Signal, stop func(), stderr io.Writer) {
	<-c
	stop()
	sig := <-c
	fmt.Fprintf(stderr, "sluice: %v again during shutdown: exiting now, without waiting for in-flight calls\n", sig)
	os.Exit(exitError)
}
