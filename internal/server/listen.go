package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"
)

// listenGRPC binds gRPC's listener: the unix socket o.GRPCUnixSocket when
// set, else TCP on o.GRPCAddr.
func listenGRPC(o Options) (net.Listener, error) {
	if o.GRPCUnixSocket == "" {
		ln, err := net.Listen("tcp", o.GRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("server: listen for gRPC on %s: %w", o.GRPCAddr, err)
		}
		return ln, nil
	}
	path := o.GRPCUnixSocket
	if err := removeStaleSocket(path); err != nil {
		return nil, fmt.Errorf("server: listen for gRPC on unix socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("server: listen for gRPC on unix socket %s: %w", path, err)
	}
	return ln, nil
}

// removeStaleSocket removes path if it is a unix socket nothing accepts
// on (left by a process that died without closing it). Any other file, or
// a socket in use, is left alone and is an error.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process", path)
	}
	return os.Remove(path)
}
