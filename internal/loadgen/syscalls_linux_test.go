//go:build linux

package loadgen

import (
	"net"
	"testing"
)

func TestIOSyscalls(t *testing.T) {
	cases := []struct {
		name string
		file string
		want uint64
		ok   bool
	}{
		{"both lines", "rchar: 100\nwchar: 200\nsyscr: 7\nsyscw: 5\nread_bytes: 0\n", 12, true},
		{"zeros", "syscr: 0\nsyscw: 0\n", 0, true},
		{"no syscw", "rchar: 1\nsyscr: 7\n", 0, false},
		{"not a number", "syscr: x\nsyscw: 5\n", 0, false},
		{"empty", "", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, ok := ioSyscalls([]byte(c.file))
			if ok != c.ok || (ok && n != c.want) {
				t.Errorf("ioSyscalls = %d, %v; want %d, %v", n, ok, c.want, c.ok)
			}
		})
	}
}

// TestProcessSyscallsCountsSocketIO writes and reads on a loopback
// connection and checks that the count grew by at least those calls.
func TestProcessSyscallsCountsSocketIO(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	before, ok := processSyscalls()
	if !ok {
		t.Fatal("/proc/self/io not readable")
	}
	const n = 20
	buf := make([]byte, 1)
	for range n {
		if _, err := conn.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := processSyscalls()
	if after-before < 2*n {
		t.Errorf("%d read and write system calls counted for %d writes and %d reads", after-before, n, n)
	}
}
