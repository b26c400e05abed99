package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/sirupsen/logrus"
)

// debugServer serves Go's pprof handlers on their own listener, apart from
// the HTTP port Envoy and load balancers reach. It is off unless
// SLUICE_DEBUG_ADDR is set, and meant for a loopback address.
type debugServer struct {
	srv *http.Server
	ln  net.Listener
}

// startDebug listens on addr and serves /debug/pprof/ until stop is called.
// A non-loopback address is allowed but logged as a warning: profiles and
// goroutine dumps show request data.
func startDebug(addr string, log *logrus.Logger) (*debugServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listener: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.WithField("addr", ln.Addr().String()).Warn("debug listener is not on loopback: pprof exposes goroutine stacks and profiles")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d := &debugServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("debug listener failed")
		}
	}()
	log.WithField("addr", ln.Addr().String()).Info("debug listener (pprof) serving")
	return d, nil
}

// Addr is the address the debug listener bound.
func (d *debugServer) Addr() string { return d.ln.Addr().String() }

// stop closes the listener and waits briefly for open requests.
func (d *debugServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = d.srv.Shutdown(ctx)
}
