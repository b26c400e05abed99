//go:build linux

package loadgen

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// processSyscalls returns the read and write system calls this process
// has made (syscr + syscw of /proc/self/io, every thread counted): on a
// socket, each read or write, one that finds nothing to read included.
// ok is false when the file cannot be read.
func processSyscalls() (n uint64, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	return ioSyscalls(data)
}

// ioSyscalls sums the syscr and syscw lines of a /proc/PID/io file.
func ioSyscalls(data []byte) (n uint64, ok bool) {
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, value, cut := bytes.Cut(sc.Bytes(), []byte(": "))
		if !cut || (string(name) != "syscr" && string(name) != "syscw") {
			continue
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			return 0, false
		}
		n += v
		found++
	}
	return n, found == 2
}
