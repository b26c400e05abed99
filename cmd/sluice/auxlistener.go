package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/server"
)

// auxServer is an HTTP listener of its own, apart from the HTTP port Envoy
// and load balancers reach: the metrics listener of USE_PROMETHEUS.
type auxServer struct {
	srv *http.Server
	ln  net.Listener
}

// startAux listens on addr and serves h until stop is called; name says
// which listener it is, in errors and logs.
// The HTTP port's limits (SLUICE_HTTP_*) bound it too.
func startAux(name, addr string, h http.Handler, limits server.HTTPLimits, log *logrus.Logger) (*auxServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	d := &auxServer{srv: &http.Server{Handler: h}}
	d.ln = server.Bound(d.srv, ln, limits, log.WithField("listener", name))
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Errorf("%s listener failed", name)
		}
	}()
	log.WithField("addr", ln.Addr().String()).Infof("%s listener serving", name)
	return d, nil
}

// Addr is the address the listener bound.
func (d *auxServer) Addr() string { return d.ln.Addr().String() }

// stop closes the listener and waits briefly for open requests.
func (d *auxServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = d.srv.Shutdown(ctx)
}
