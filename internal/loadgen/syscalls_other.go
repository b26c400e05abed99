//go:build !linux

package loadgen

// processSyscalls is not measured on this platform.
func processSyscalls() (n uint64, ok bool) { return 0, false }
